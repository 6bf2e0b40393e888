use super::*;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};
use std::path::PathBuf;

fn tcp(host: &str, port: u16) -> Location {
    Location::Tcp {
        host: host.to_owned(),
        port,
    }
}

fn loc_err(text: &str) -> LocationError {
    match text.parse::<Location>() {
        Err(ConfigError::InvalidLocation { value, reason }) => {
            assert_eq!(value, redact_credentials(text));
            reason
        }
        other => panic!("{text:?}: expected InvalidLocation, got {other:?}"),
    }
}

#[test]
fn location_accepted_forms() {
    let cases = [
        ("127.0.0.1:6379", tcp("127.0.0.1", 6379), "127.0.0.1:6379"),
        ("[::1]:6379", tcp("::1", 6379), "[::1]:6379"),
        ("[0:0::1]:1", tcp("::1", 1), "[::1]:1"),
        (
            "[2001:db8::7]:65535",
            tcp("2001:db8::7", 65535),
            "[2001:db8::7]:65535",
        ),
        (
            "redis.example:6379",
            tcp("redis.example", 6379),
            "redis.example:6379",
        ),
        (
            "Redis.Example:6379",
            tcp("redis.example", 6379),
            "redis.example:6379",
        ),
        ("localhost:6380", tcp("localhost", 6380), "localhost:6380"),
        ("my_host-1:6379", tcp("my_host-1", 6379), "my_host-1:6379"),
        ("  10.0.0.1:6379 ", tcp("10.0.0.1", 6379), "10.0.0.1:6379"),
        (
            "/run/redis.sock",
            Location::Unix(PathBuf::from("/run/redis.sock")),
            "/run/redis.sock",
        ),
    ];
    for (text, want, display) in cases {
        let got: Location = text.parse().unwrap_or_else(|e| panic!("{text:?}: {e}"));
        assert_eq!(got, want, "{text:?}");
        assert_eq!(got.to_string(), display, "{text:?}");
        // The canonical text parses back to the same location.
        assert_eq!(display.parse::<Location>().unwrap(), want);
    }
}

#[test]
fn location_errors() {
    use LocationError::*;
    let cases = [
        ("", Empty),
        ("   ", Empty),
        ("localhost", MissingPort),
        ("127.0.0.1", MissingPort),
        ("127.0.0.1:", MissingPort),
        ("[::1]", MissingPort),
        ("[::1]:", MissingPort),
        (":6379", MissingHost),
        ("127.0.0.1:0", InvalidPort),
        ("127.0.0.1:65536", InvalidPort),
        ("127.0.0.1:70000", InvalidPort),
        ("127.0.0.1:-1", InvalidPort),
        ("127.0.0.1:+80", InvalidPort),
        ("127.0.0.1:http", InvalidPort),
        ("127.0.0.1:99999999999999999999", InvalidPort),
        ("[::1:6379", UnbalancedBrackets),
        ("::1]:6379", UnbalancedBrackets),
        ("[[::1]]:6379", UnbalancedBrackets),
        ("[::1]x:6379", UnbalancedBrackets),
        ("[::1]:63]79", UnbalancedBrackets),
        ("[127.0.0.1]:6379", InvalidIpv6),
        ("[nope]:6379", InvalidIpv6),
        ("::1:6379", BareIpv6),
        ("::1", BareIpv6),
        ("2001:db8::7:6379", BareIpv6),
        ("redis.sock", RelativePath),
        ("run/redis.sock", RelativePath),
        ("./redis.sock", RelativePath),
        ("dir/x:6379", RelativePath),
        ("redis://localhost:6379", Url),
        ("alice:pw@localhost:6379", UserInfo),
        ("pw@localhost:6379", UserInfo),
        ("256.1.1.1:6379", InvalidHost),
        ("10.0.0:6379", InvalidHost),
        ("bad host:6379", InvalidHost),
        ("a..b:6379", InvalidHost),
        (".a:6379", InvalidHost),
        ("h\u{e9}te:6379", InvalidHost),
    ];
    for (text, want) in cases {
        assert_eq!(loc_err(text), want, "{text:?}");
    }
}

/// A host and port as a server names them (no brackets around IPv6) make
/// the location their text parses to: the same normal form, so every
/// spelling of one address is one location.
#[test]
fn tcp_locations_are_those_parsing_makes() {
    for (host, port, text) in [
        ("127.0.0.1", 6379, "127.0.0.1:6379"),
        ("::1", 7000, "[::1]:7000"),
        ("0:0:0:0:0:0:0:1", 7000, "[::1]:7000"),
        ("2001:DB8::7", 1, "[2001:db8::7]:1"),
        ("Redis-A.Example", 7001, "redis-a.example:7001"),
    ] {
        let location = Location::tcp(host, port).unwrap_or_else(|e| panic!("{host}: {e}"));
        assert_eq!(location, text.parse().unwrap(), "{host}");
        assert_eq!(location.to_string(), text, "{host}");
    }
    use LocationError::*;
    for (host, port, want) in [
        ("", 1, MissingHost),
        ("h", 0, InvalidPort),
        ("bad host", 1, InvalidHost),
        ("/run/redis.sock", 1, InvalidHost),
        ("256.1.1.1", 1, InvalidHost),
        ("a@b", 1, InvalidHost),
        ("fe80::1%eth0", 1, InvalidIpv6),
        ("[::1]", 1, InvalidIpv6),
    ] {
        assert_eq!(Location::tcp(host, port), Err(want), "{host:?}");
    }
}

#[test]
fn location_error_message_names_value() {
    let err = "127.0.0.1:0".parse::<Location>().unwrap_err();
    assert_eq!(
        err.to_string(),
        "invalid location \"127.0.0.1:0\": port must be a number from 1 to 65535"
    );
}

#[test]
fn credentials_never_echoed() {
    for (text, shown) in [
        ("redis://:s3cret@host/0", "redis://***@host/0"),
        ("rediss://alice:s3cret@h:6380", "rediss://***@h:6380"),
        ("alice:s3cret@127.0.0.1:6379", "***@127.0.0.1:6379"),
        ("a@b, c:d@e", "***@b, ***@e"),
        ("p@ss@host:1", "***@***@host:1"),
        ("127.0.0.1:6379", "127.0.0.1:6379"),
    ] {
        assert_eq!(redact_credentials(text), shown, "{text:?}");
    }
    let err = "redis://:s3cret@host/0".parse::<Location>().unwrap_err();
    assert_eq!(
        err.to_string(),
        "invalid location \"redis://***@host/0\": write host:port, not a URL"
    );
    let err = "alice:s3cret@host:6379".parse::<Location>().unwrap_err();
    assert_eq!(
        err.to_string(),
        "invalid location \"***@host:6379\": credentials go in user and password, not in the location"
    );
}

#[test]
fn location_ip() {
    assert_eq!(
        tcp("127.0.0.1", 1).ip(),
        Some(IpAddr::V4(Ipv4Addr::LOCALHOST))
    );
    assert_eq!(tcp("::1", 1).ip(), Some(IpAddr::V6(Ipv6Addr::LOCALHOST)));
    assert_eq!(tcp("redis.example", 1).ip(), None);
    assert_eq!(Location::Unix("/x".into()).ip(), None);
}

#[test]
fn location_host() {
    let host = |text: &str| text.parse::<Location>().unwrap().host().to_string();
    assert_eq!(host("127.0.0.1:7000"), "127.0.0.1");
    assert_eq!(host("[::1]:7000"), "::1");
    assert_eq!(host("redis.example:1"), "redis.example");
    assert_eq!(Location::Unix("/x".into()).host(), "");
}

#[test]
fn roles_and_protocols() {
    for role in [Role::Master, Role::Slave, Role::Auto, Role::Cluster] {
        assert_eq!(role.as_str().parse::<Role>().unwrap(), role);
        assert_eq!(role.to_string(), role.as_str());
    }
    for proto in [Protocol::Resp2, Protocol::Resp3, Protocol::Default] {
        assert_eq!(proto.as_str().parse::<Protocol>().unwrap(), proto);
        assert_eq!(proto.to_string(), proto.as_str());
    }
    let err = "MASTER".parse::<Role>().unwrap_err();
    assert_eq!(
        err.to_string(),
        "invalid type \"MASTER\" (expected one of: master, slave, auto, cluster)"
    );
    assert!("".parse::<Role>().is_err());
    let err = "resp3".parse::<Protocol>().unwrap_err();
    assert_eq!(
        err.to_string(),
        "invalid protocol \"resp3\" (expected one of: RESP2, RESP3, default)"
    );
}

#[test]
fn subnets_example_from_the_docs() {
    let s = Subnets::parse("0 192.168.1.102/32, 1 192.168.1.103/32, 2 0.0.0.0/32").unwrap();
    assert!(!s.is_empty());
    let w = |text: &str| s.weight(&text.parse().unwrap());
    assert_eq!(w("192.168.1.102:6379"), 0);
    assert_eq!(w("192.168.1.103:6379"), 1);
    assert_eq!(w("0.0.0.0:6379"), 2);
    assert_eq!(w("192.168.1.104:6379"), Subnets::WORST);
    assert_eq!(w("redis.example:6379"), Subnets::WORST);
    assert_eq!(w("[::1]:6379"), Subnets::WORST);
    assert_eq!(w("/run/redis.sock"), Subnets::BEST);
}

#[test]
fn subnets_first_match_wins_and_prefixes() {
    let s = Subnets::parse("5 10.1.0.0/16,3 10.0.0.0/8,\t9 0.0.0.0/0").unwrap();
    let ip = |t: &str| t.parse::<IpAddr>().unwrap();
    assert_eq!(s.weight_ip(ip("10.1.2.3")), 5);
    assert_eq!(s.weight_ip(ip("10.2.2.3")), 3);
    assert_eq!(s.weight_ip(ip("11.0.0.1")), 9);
    assert_eq!(s.weight_ip(ip("::ffff:10.1.0.1")), 5);
    assert_eq!(s.weight_ip(ip("2001:db8::1")), Subnets::WORST);
    // Host bits below the prefix are ignored.
    let s = Subnets::parse("7 10.1.2.3/8").unwrap();
    assert_eq!(s.weight_ip(ip("10.200.0.1")), 7);
    assert_eq!(s.weight_ip(ip("11.1.2.3")), Subnets::WORST);
    // The largest weight still ranks before "no match".
    let s = Subnets::parse("4294967294 1.2.3.4/32").unwrap();
    assert_eq!(s.weight_ip(ip("1.2.3.4")), u32::MAX - 1);
}

#[test]
fn subnets_empty() {
    for text in ["", "  ", "\t"] {
        let s = Subnets::parse(text).unwrap();
        assert!(s.is_empty());
        assert_eq!(s, Subnets::default());
        assert_eq!(s.weight(&tcp("127.0.0.1", 1)), Subnets::WORST);
        assert_eq!(s.weight(&Location::Unix("/s".into())), Subnets::BEST);
    }
}

#[test]
fn subnets_errors() {
    let cases = [
        (
            "0 192.168.1.1",
            "0 192.168.1.1",
            "mask needs a /prefix length",
        ),
        (
            "x 1.2.3.4/32",
            "x 1.2.3.4/32",
            "weight must be a non-negative integer",
        ),
        (
            "-1 1.2.3.4/32",
            "-1 1.2.3.4/32",
            "weight must be a non-negative integer",
        ),
        (
            "99999999999 1.2.3.4/32",
            "99999999999 1.2.3.4/32",
            "weight is too large",
        ),
        (
            "4294967295 1.2.3.4/32",
            "4294967295 1.2.3.4/32",
            "weight is too large",
        ),
        (
            "0 1.2.3.4/33",
            "0 1.2.3.4/33",
            "prefix length must be 0 to 32",
        ),
        ("0 1.2.3.4/", "0 1.2.3.4/", "prefix length must be 0 to 32"),
        (
            "0 1.2.3.4/+8",
            "0 1.2.3.4/+8",
            "prefix length must be 0 to 32",
        ),
        ("0 1.2.3/24", "0 1.2.3/24", "invalid IPv4 address"),
        ("0 ::1/128", "0 ::1/128", "only IPv4 masks are supported"),
        ("0 1.2.3.4/32,", "", "empty entry"),
        ("0 1.2.3.4/32,,1 1.2.3.5/32", "", "empty entry"),
        (
            "0 1.2.3.4/32 junk",
            "0 1.2.3.4/32 junk",
            "expected a weight and a mask separated by blanks",
        ),
        (
            "1.2.3.4/32",
            "1.2.3.4/32",
            "expected a weight and a mask separated by blanks",
        ),
        (
            "0 1.2.3.4/32, 1 1.2.3.5",
            "1 1.2.3.5",
            "mask needs a /prefix length",
        ),
    ];
    for (text, entry, reason) in cases {
        match Subnets::parse(text) {
            Err(ConfigError::InvalidSubnet {
                entry: e,
                reason: r,
            }) => {
                assert_eq!((e.as_str(), r), (entry, reason), "{text:?}");
            }
            other => panic!("{text:?}: expected InvalidSubnet, got {other:?}"),
        }
    }
    let msg = Subnets::parse("0 1.2.3.4").unwrap_err().to_string();
    assert_eq!(
        msg,
        "invalid subnets entry \"0 1.2.3.4\": mask needs a /prefix length \
         (expected \"<weight> <ipv4>/<prefix>\", e.g. \"0 192.168.1.0/24\")"
    );
}

fn args(location: &str) -> DbArgs<'_> {
    DbArgs {
        location,
        ..DbArgs::default()
    }
}

#[test]
fn defaults_from_vmod_vcc() {
    let c = DbConfig::from_args(&args("127.0.0.1:6379")).unwrap();
    assert_eq!(c.location, Some(tcp("127.0.0.1", 6379)));
    assert_eq!(c.role, Role::Auto);
    assert_eq!(c.connection_timeout, Some(Duration::from_millis(1000)));
    assert_eq!(c.connection_ttl, None);
    assert_eq!(c.command_timeout, None);
    assert_eq!(c.max_command_retries, 0);
    assert!(c.shared_connections);
    assert_eq!(c.max_connections, 128);
    assert_eq!(c.protocol, Protocol::Default);
    assert_eq!(c.user, None);
    assert_eq!(c.password, None);
    assert_eq!(c.sickness_ttl, Duration::from_secs(60));
    assert!(!c.ignore_slaves);
    assert_eq!(c.max_cluster_hops, 32);
    assert!(!c.debug);
}

#[test]
fn every_argument_is_carried() {
    let a = DbArgs {
        location: "/run/redis.sock",
        role: "slave",
        connection_timeout: 0,
        connection_ttl: 300,
        command_timeout: 250,
        max_command_retries: 2,
        shared_connections: false,
        max_connections: 1,
        protocol: "RESP3",
        user: "bob",
        password: Secret("s3cret"),
        sickness_ttl: 0,
        ignore_slaves: true,
        max_cluster_hops: 0,
        debug: true,
        ..DbArgs::default()
    };
    let c = DbConfig::from_args(&a).unwrap();
    assert_eq!(c.location, Some(Location::Unix("/run/redis.sock".into())));
    assert_eq!(c.role, Role::Slave);
    assert_eq!(c.connection_timeout, None);
    assert_eq!(c.connection_ttl, Some(Duration::from_secs(300)));
    assert_eq!(c.command_timeout, Some(Duration::from_millis(250)));
    assert_eq!(c.max_command_retries, 2);
    assert!(!c.shared_connections);
    assert_eq!(c.max_connections, 1);
    assert_eq!(c.protocol, Protocol::Resp3);
    assert_eq!(c.user.as_deref(), Some("bob"));
    assert_eq!(c.password.as_deref(), Some("s3cret"));
    assert_eq!(c.sickness_ttl, Duration::ZERO);
    assert!(c.ignore_slaves);
    // 0 ("no limit") is bounded, and said only in cluster mode.
    assert_eq!(c.max_cluster_hops, UNLIMITED_CLUSTER_HOPS);
    assert_eq!(c.adjusted, []);
    assert!(c.debug);

    let c = DbConfig::from_args(&DbArgs {
        role: "master",
        protocol: "RESP2",
        password: Secret("only-password"),
        ..args("[::1]:6380")
    })
    .unwrap();
    assert_eq!(c.role, Role::Master);
    assert_eq!(c.protocol, Protocol::Resp2);
    assert_eq!(c.user, None);
    assert_eq!(c.password.as_deref(), Some("only-password"));
}

fn err(a: DbArgs) -> String {
    DbConfig::from_args(&a).unwrap_err().to_string()
}

#[test]
fn argument_errors() {
    let base = args("127.0.0.1:6379");
    // No first server: every server comes from add_server().
    assert_eq!(DbConfig::from_args(&args("")).unwrap().location, None);
    assert_eq!(DbConfig::from_args(&args("  ")).unwrap().location, None);
    assert_eq!(
        err(args("localhost")),
        "invalid location \"localhost\": missing port (expected host:port, \
         [ipv6]:port or an absolute UNIX socket path)"
    );
    assert_eq!(
        DbConfig::from_args(&DbArgs {
            role: "cluster",
            ..base
        })
        .unwrap()
        .role,
        Role::Cluster
    );
    // Each cluster node gets its own multiplexed connections.
    let piped = DbConfig::from_args(&DbArgs {
        role: "cluster",
        pipelining: true,
        ..base
    })
    .unwrap();
    assert_eq!((piped.role, piped.pipelining), (Role::Cluster, true));
    assert_eq!(
        err(DbArgs {
            role: "cluster",
            ..args("/run/redis.sock")
        }),
        "type=cluster needs host:port locations, not the UNIX socket \"/run/redis.sock\""
    );
    assert!(err(DbArgs {
        role: "primary",
        ..base
    })
    .starts_with("invalid type \"primary\""));
    assert!(err(DbArgs {
        protocol: "RESP4",
        ..base
    })
    .starts_with("invalid protocol"));
    for (a, name, value) in [
        (
            DbArgs {
                connection_timeout: -1,
                ..base
            },
            "connection_timeout",
            -1,
        ),
        (
            DbArgs {
                connection_ttl: -2,
                ..base
            },
            "connection_ttl",
            -2,
        ),
        (
            DbArgs {
                command_timeout: -3,
                ..base
            },
            "command_timeout",
            -3,
        ),
        (
            DbArgs {
                max_command_retries: -4,
                ..base
            },
            "max_command_retries",
            -4,
        ),
        (
            DbArgs {
                sickness_ttl: -5,
                ..base
            },
            "sickness_ttl",
            -5,
        ),
        (
            DbArgs {
                max_cluster_hops: -6,
                ..base
            },
            "max_cluster_hops",
            -6,
        ),
        (
            DbArgs {
                max_connections: -7,
                ..base
            },
            "max_connections",
            -7,
        ),
    ] {
        let msg = err(a);
        assert!(msg.starts_with(name), "{msg}");
        assert!(msg.contains(&value.to_string()), "{msg}");
    }
    assert_eq!(
        err(DbArgs {
            max_command_retries: -4,
            ..base
        }),
        "max_command_retries must not be negative (got -4)"
    );
    assert_eq!(
        err(DbArgs {
            max_connections: 0,
            ..base
        }),
        "max_connections must be at least 1 (got 0)"
    );
    assert_eq!(
        err(DbArgs {
            max_connections: 1 << 40,
            ..base
        }),
        "max_connections is too large (got 1099511627776, at most 4294967295)"
    );
    assert_eq!(
        err(DbArgs {
            max_command_retries: i64::MAX,
            ..base
        }),
        format!(
            "max_command_retries is too large (got {}, at most 4294967295)",
            i64::MAX
        )
    );
    assert!(err(DbArgs {
        max_cluster_hops: 1 << 33,
        ..base
    })
    .contains("too large"));
    // A user without a password is accepted and sends no AUTH (C VMOD).
    let c = DbConfig::from_args(&DbArgs {
        user: "bob",
        ..base
    })
    .unwrap();
    assert_eq!((c.user, c.password), (None, None));
}

#[test]
fn tls_material_is_checked_only_with_tls_true() {
    let base = args("127.0.0.1:6379");
    // Ignored without tls=true, as the C VMOD does.
    let tls = TlsArgs {
        enabled: true,
        ..TlsArgs::default()
    };
    let c = DbConfig::from_args(&DbArgs {
        tls: TlsArgs {
            enabled: false,
            cafile: "/nonexistent/ca.pem",
            sni: "bad name!",
            ..tls
        },
        ..base
    })
    .unwrap();
    assert!(c.tls.is_none());
    assert_eq!(
        err(DbArgs {
            tls: TlsArgs {
                cafile: "/nonexistent/ca.pem",
                ..tls
            },
            ..base
        }),
        "tls_cafile \"/nonexistent/ca.pem\": no such file or directory"
    );
    assert_eq!(
        err(DbArgs {
            tls,
            ..args("/run/redis.sock")
        }),
        "tls=true needs a host:port location, not the UNIX socket \"/run/redis.sock\""
    );
    // System roots by default.
    let c = DbConfig::from_args(&DbArgs { tls, ..base }).unwrap();
    assert!(c.tls.is_some());
}

#[test]
fn first_bad_argument_is_reported() {
    let a = DbArgs {
        connection_timeout: -1,
        max_connections: 0,
        tls: TlsArgs {
            enabled: true,
            ..TlsArgs::default()
        },
        ..args("127.0.0.1:6379")
    };
    assert!(err(a).starts_with("connection_timeout"));
}

#[test]
fn huge_durations_are_accepted() {
    let c = DbConfig::from_args(&DbArgs {
        connection_timeout: i64::MAX,
        connection_ttl: i64::MAX,
        ..args("127.0.0.1:6379")
    })
    .unwrap();
    assert_eq!(
        c.connection_timeout,
        Some(Duration::from_millis(i64::MAX as u64))
    );
    assert_eq!(c.connection_ttl, Some(Duration::from_secs(i64::MAX as u64)));
}

#[test]
fn password_stays_out_of_debug_output() {
    let a = DbArgs {
        user: "bob",
        password: Secret("hunter2-s3cret"),
        ..args("127.0.0.1:6379")
    };
    let shown = format!("{a:?}");
    assert!(!shown.contains("hunter2"), "{shown}");
    assert!(
        shown.contains("<redacted>") && shown.contains("bob"),
        "{shown}"
    );
    let c = DbConfig::from_args(&a).unwrap();
    for shown in [
        format!("{c:?}"),
        format!("{c:#?}"),
        format!("{:?}", c.clone()),
    ] {
        assert!(!shown.contains("hunter2"), "{shown}");
        assert!(shown.contains("<redacted>"), "{shown}");
    }
    // No password: nothing to hide, and nothing pretends there is one.
    let c = DbConfig::from_args(&args("127.0.0.1:6379")).unwrap();
    assert!(format!("{c:?}").contains("password: None"));
    assert!(!format!("{:?}", args("x:1")).contains("<redacted>"));
}

#[test]
fn pipelining_needs_shared_connections() {
    let mut a = args("127.0.0.1:6379");
    a.pipelining = true;
    assert!(DbConfig::from_args(&a).unwrap().pipelining);
    a.shared_connections = false;
    assert_eq!(err(a), "pipelining=true needs shared_connections=true");
}

/// A value not used as given is in `adjusted`, with what was given and
/// what is used (logged at `vcl_init`); the C VMOD takes them as given.
#[test]
fn values_not_used_as_given_are_listed() {
    let pool_max = super::MAX_SHARED_POOL;
    let shared = DbConfig::from_args(&DbArgs {
        max_connections: 20_000,
        ..DbArgs::default()
    })
    .unwrap();
    assert_eq!(shared.max_connections, pool_max);
    assert_eq!(shared.adjusted.len(), 1);
    assert_eq!(
        (
            shared.adjusted[0].arg,
            shared.adjusted[0].given,
            shared.adjusted[0].used
        ),
        ("max_connections", 20_000, pool_max)
    );
    assert!(shared.adjusted[0]
        .to_string()
        .starts_with("max_connections=20000 is used as max_connections=10000: "));

    // Private: a budget per worker thread, no pool to bound.
    let private = DbConfig::from_args(&DbArgs {
        shared_connections: false,
        max_connections: 20_000,
        ..DbArgs::default()
    })
    .unwrap();
    assert_eq!(private.max_connections, 20_000);
    assert_eq!(private.adjusted, []);

    // At the bound: used as given.
    let at_bound = DbConfig::from_args(&DbArgs {
        max_connections: i64::from(pool_max),
        ..DbArgs::default()
    })
    .unwrap();
    assert_eq!(at_bound.adjusted, []);

    let cluster = DbConfig::from_args(&DbArgs {
        location: "127.0.0.1:7000",
        role: "cluster",
        max_cluster_hops: 0,
        ..DbArgs::default()
    })
    .unwrap();
    assert_eq!(cluster.max_cluster_hops, UNLIMITED_CLUSTER_HOPS);
    assert_eq!(
        cluster.adjusted[0].to_string().split(':').next(),
        Some("max_cluster_hops=0 is used as max_cluster_hops=1024")
    );
}
