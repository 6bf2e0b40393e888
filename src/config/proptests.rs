//! Property tests of what `vcl_init` hands us from the VCL: locations,
//! subnet lists and the whole `redis.db()` argument set.
//!
//! Runtime: about 3 s of CPU in a debug build (`cargo test --lib
//! config::proptests`). Found no bug.
use super::*;
use proptest::collection::vec;
use proptest::prelude::*;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};

/// Text that looks like a location often enough to be accepted.
fn location_text() -> impl Strategy<Value = String> {
    let host = prop_oneof![
        any::<Ipv4Addr>().prop_map(|ip| ip.to_string()),
        any::<Ipv6Addr>().prop_map(|ip| format!("[{ip}]")),
        any::<Ipv6Addr>().prop_map(|ip| ip.to_string()),
        "[a-zA-Z0-9_.-]{1,12}",
        Just("LocalHost".to_owned()),
        Just(String::new()),
    ];
    let port = prop_oneof![
        (1..=u16::MAX).prop_map(|p| p.to_string()),
        Just("0".to_owned()),
        Just("65536".to_owned()),
        Just("+1".to_owned()),
        "[0-9]{0,6}",
    ];
    let blank = prop_oneof![Just(""), Just(" "), Just("\t"), Just("\u{a0}"), Just("\n")];
    prop_oneof![
        4 => (blank.clone(), host, ":", port, blank).prop_map(|(a, h, c, p, b)| format!("{a}{h}{c}{p}{b}")),
        1 => "/[ -~]{0,16}",
        1 => vec(
            prop::sample::select(vec![
                "[", "]", ":", "::", "/", ".", "..", "://", "1", "80", "a", "Z", " ", "\u{e9}",
                "\0", "\u{3000}", "redis", "sock", "::ffff:", "%eth0",
            ]),
            0..10,
        )
        .prop_map(|parts| parts.concat()),
        1 => any::<String>(),
    ]
}

fn subnets_text() -> impl Strategy<Value = String> {
    vec(
        prop::sample::select(vec![
            "0",
            "1",
            "4294967294",
            "4294967295",
            " ",
            "\t",
            ",",
            "/",
            ".",
            "1.2.3.4",
            "0.0.0.0",
            "::1",
            "32",
            "33",
            "8",
            "+8",
            "-1",
            "x",
            "\u{a0}",
            "\u{663}",
        ]),
        0..16,
    )
    .prop_map(|parts| parts.concat())
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 2000, ..ProptestConfig::default() })]

    /// Any text: no panic; an error names the text as given (user info
    /// redacted); a parsed
    /// location prints as text that parses back to it, unchanged.
    #[test]
    fn location_parses_back_from_its_display(text in location_text()) {
        match text.parse::<Location>() {
            Ok(location) => {
                let display = location.to_string();
                prop_assert_eq!(display.parse::<Location>(), Ok(location.clone()), "{}", display);
                prop_assert_eq!(location.to_string(), display.parse::<Location>().unwrap().to_string());
                if let Location::Tcp { host, port } = &location {
                    prop_assert!(*port > 0);
                    prop_assert_eq!(host.to_ascii_lowercase(), host.clone());
                    prop_assert_eq!(location.ip().is_some(), host.parse::<IpAddr>().is_ok());
                }
            }
            Err(ConfigError::InvalidLocation { value, .. }) => {
                prop_assert_eq!(value, redact_credentials(&text));
            }
            Err(other) => prop_assert!(false, "{:?}: {:?}", text, other),
        }
    }

    /// Literal addresses are accepted as they are (IPv6 in brackets).
    #[test]
    fn literal_addresses_are_accepted(ip in any::<IpAddr>(), port in 1..=u16::MAX) {
        let text = match ip {
            IpAddr::V4(v4) => format!("{v4}:{port}"),
            IpAddr::V6(v6) => format!("[{v6}]:{port}"),
        };
        let location: Location = text.parse().unwrap();
        prop_assert_eq!(location.ip(), Some(ip));
        prop_assert_eq!(location.to_string(), text);
    }

    /// Any text into `Subnets::parse`: no panic.
    #[test]
    fn subnets_never_panic(text in prop_oneof![subnets_text(), any::<String>()]) {
        if let Ok(subnets) = Subnets::parse(&text) {
            prop_assert_eq!(subnets.is_empty(), text.trim().is_empty());
        }
    }

    /// The weight of an address is that of the first mask matching it
    /// (host bits of the mask ignored), else WORST; IPv4-mapped IPv6
    /// matches as IPv4, UNIX sockets are BEST.
    #[test]
    fn subnet_weight_is_the_first_match(
        entries in vec((0..u32::MAX, any::<Ipv4Addr>(), 0..=32u32, 0..3usize), 1..6),
        probes in vec(any::<Ipv4Addr>(), 8),
    ) {
        let blanks = ["", " ", "\t "];
        let text = entries
            .iter()
            .map(|(w, ip, prefix, b)| format!("{}{w} {ip}/{prefix}{}", blanks[*b], blanks[*b]))
            .collect::<Vec<_>>()
            .join(",");
        let subnets = Subnets::parse(&text).unwrap();
        // Probes: random, and one inside each network.
        let inside = entries.iter().map(|(_, ip, _, _)| *ip);
        for probe in probes.into_iter().chain(inside) {
            let want = entries
                .iter()
                .find(|(_, net, prefix, _)| {
                    let shift = 32 - prefix;
                    u64::from(u32::from(probe)) >> shift == u64::from(u32::from(*net)) >> shift
                })
                .map_or(Subnets::WORST, |(w, ..)| *w);
            prop_assert_eq!(subnets.weight_ip(IpAddr::V4(probe)), want, "{} in {}", probe, text);
            prop_assert_eq!(subnets.weight_ip(IpAddr::V6(probe.to_ipv6_mapped())), want);
            let location: Location = format!("{probe}:6379").parse().unwrap();
            prop_assert_eq!(subnets.weight(&location), want);
        }
        prop_assert_eq!(subnets.weight(&Location::Unix("/s".into())), Subnets::BEST);
    }
}

fn int() -> impl Strategy<Value = i64> {
    prop_oneof![
        -2i64..3,
        Just(i64::MIN),
        Just(i64::MAX),
        Just(i64::from(u32::MAX)),
        Just(i64::from(u32::MAX) + 1),
        any::<i64>(),
    ]
}

fn word() -> impl Strategy<Value = String> {
    prop_oneof![
        prop::sample::select(vec![
            "",
            "master",
            "slave",
            "auto",
            "cluster",
            "RESP2",
            "RESP3",
            "default",
            "MASTER",
            "127.0.0.1:6379",
            "/run/redis.sock",
            " ",
            "x",
        ])
        .prop_map(str::to_owned),
        location_text(),
    ]
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 500, ..ProptestConfig::default() })]

    /// Any `redis.db()` arguments: no panic, and accepted exactly when
    /// every argument is valid, each carried over as given.
    #[test]
    fn db_args_are_validated(
        strings in vec(word(), 10),
        ints in vec(int(), 7),
        flags in vec(any::<bool>(), 5),
        password in prop_oneof![Just(String::new()), "pw-[a-z0-9]{4,8}"],
    ) {
        let a = DbArgs {
            location: &strings[0],
            role: &strings[1],
            connection_timeout: ints[0],
            connection_ttl: ints[1],
            command_timeout: ints[2],
            max_command_retries: ints[3],
            shared_connections: flags[0],
            max_connections: ints[4],
            protocol: &strings[2],
            tls: TlsArgs {
                enabled: false,
                cafile: if flags[2] { "" } else { &strings[3] },
                capath: if flags[2] { "" } else { &strings[4] },
                certfile: "",
                keyfile: "",
                sni: if flags[2] { "" } else { &strings[5] },
                verify_name: flags[2],
            },
            user: &strings[6],
            password: Secret(&password),
            sickness_ttl: ints[5],
            ignore_slaves: flags[3],
            max_cluster_hops: ints[6],
            debug: flags[4],
            pipelining: false,
            near_cache: 0,
            near_cache_ttl: 0,
        };
        let u32_count = |v: i64| u32::try_from(v).is_ok();
        let valid = (a.location.trim().is_empty() || a.location.parse::<Location>().is_ok())
            && (matches!(a.role, "master" | "slave" | "auto")
                // Cluster seeds are host:port only.
                || (a.role == "cluster"
                    && !matches!(a.location.parse::<Location>(), Ok(Location::Unix(_)))))
            && a.connection_timeout >= 0
            && a.connection_ttl >= 0
            && a.command_timeout >= 0
            && u32_count(a.max_command_retries)
            && a.max_connections >= 1
            && u32_count(a.max_connections)
            && matches!(a.protocol, "RESP2" | "RESP3" | "default")
            && a.sickness_ttl >= 0
            && u32_count(a.max_cluster_hops);
        match DbConfig::from_args(&a) {
            Ok(c) => {
                prop_assert!(valid, "{:?} accepted", a);
                prop_assert_eq!(c.location, a.location.parse::<Location>().ok());
                // Shared pools hold at most MAX_SHARED_POOL; 0 hops is "no limit".
                let pool_max = i64::from(super::MAX_SHARED_POOL);
                let max_connections = if a.shared_connections { a.max_connections.min(pool_max) } else { a.max_connections };
                prop_assert_eq!(i64::from(c.max_connections), max_connections);
                prop_assert_eq!(c.adjusted.iter().any(|x| x.arg == "max_connections"), max_connections != a.max_connections);
                prop_assert_eq!(i64::from(c.max_command_retries), a.max_command_retries);
                let hops = if a.max_cluster_hops == 0 { i64::from(UNLIMITED_CLUSTER_HOPS) } else { a.max_cluster_hops };
                prop_assert_eq!(i64::from(c.max_cluster_hops), hops);
                let ms = |v: i64| (v > 0).then(|| Duration::from_millis(v as u64));
                prop_assert_eq!(c.connection_timeout, ms(a.connection_timeout));
                prop_assert_eq!(c.command_timeout, ms(a.command_timeout));
                prop_assert_eq!(c.connection_ttl, (a.connection_ttl > 0).then(|| Duration::from_secs(a.connection_ttl as u64)));
                prop_assert_eq!(c.sickness_ttl, Duration::from_secs(a.sickness_ttl as u64));
                prop_assert_eq!(c.user.as_deref(), (!a.user.is_empty() && !a.password.is_empty()).then_some(a.user));
                prop_assert_eq!(c.password.as_deref(), (!a.password.is_empty()).then_some(a.password.0));
                prop_assert_eq!(
                    (c.shared_connections, c.ignore_slaves, c.debug),
                    (a.shared_connections, a.ignore_slaves, a.debug)
                );
            }
            Err(e) => {
                prop_assert!(!valid, "{:?} refused: {}", a, e);
                // The message never shows the password.
                if !a.password.is_empty() {
                    prop_assert!(!e.to_string().contains(a.password.0));
                }
            }
        }
    }
}
