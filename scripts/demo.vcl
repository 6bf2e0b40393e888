vcl 4.1;

# Demo VCL for scripts/demo. A template: scripts/demo replaces @VMOD_SO@ with
# the absolute path of the copied libvmod_redis.so and @REDIS_ADDR@ with the
# demo redis-server's host:port (sed), then loads the result.
#
#   /                      counter: INCR demo:hits
#   /hello                 GET demo:hello (set by scripts/demo at startup)
#   /set?key=K&value=V     SET demo:K V
#   /get?key=K             GET demo:K
#   /stats                 db.stats() as JSON
#   /metrics               db.stats(format=prometheus)

import redis from "@VMOD_SO@";

backend default none;

sub vcl_init {
    new db = redis.db(
        location="@REDIS_ADDR@",
        type=master,
        connection_timeout=500,
        command_timeout=500,
        max_connections=32);
}

sub vcl_recv {
    if (req.method != "GET" && req.method != "HEAD") {
        return (synth(405));
    }
    return (synth(200));
}

sub vcl_synth {
    if (resp.status != 200) {
        return (deliver);
    }
    set resp.http.Content-Type = "text/plain; charset=utf-8";
    set resp.http.Cache-Control = "no-store";

    if (req.url == "/") {
        db.command("INCR");
        db.push("demo:hits");
        db.execute();
        if (db.reply_is_integer()) {
            synthetic("Hello from Varnish + Redis: this page has been served " +
                db.get_integer_reply() + " times (INCR demo:hits)." + {"
"});
            return (deliver);
        }
    } elsif (req.url == "/hello") {
        db.command("GET");
        db.push("demo:hello");
        db.execute();
        if (db.reply_is_string()) {
            synthetic(db.get_string_reply() + {"
"});
            return (deliver);
        }
    } elsif (req.url ~ "^/set\?") {
        db.command("SET");
        db.push("demo:" + regsub(req.url, "^.*[?&]key=([^&]*).*$", "\1"));
        db.push(regsub(req.url, "^.*[?&]value=([^&]*).*$", "\1"));
        db.execute();
        if (db.reply_is_status()) {
            synthetic(db.get_status_reply() + {"
"});
            return (deliver);
        }
    } elsif (req.url ~ "^/get\?") {
        db.command("GET");
        db.push("demo:" + regsub(req.url, "^.*[?&]key=([^&]*).*$", "\1"));
        db.execute();
        if (db.reply_is_nil()) {
            set resp.status = 404;
            synthetic({"(nil)
"});
            return (deliver);
        }
        if (db.reply_is_string()) {
            synthetic(db.get_string_reply() + {"
"});
            return (deliver);
        }
    } elsif (req.url == "/stats") {
        set resp.http.Content-Type = "application/json";
        synthetic(db.stats());
        return (deliver);
    } elsif (req.url == "/metrics") {
        set resp.http.Content-Type = "text/plain; version=0.0.4";
        synthetic(db.stats(format=prometheus));
        return (deliver);
    } else {
        set resp.status = 404;
        synthetic({"Try /, /hello, /set?key=k&value=v, /get?key=k, /stats, /metrics
"});
        return (deliver);
    }

    # The command did not give the expected reply.
    set resp.status = 503;
    if (db.reply_is_error()) {
        synthetic("Redis error: " + db.get_error_reply() + {"
"});
    } else {
        synthetic({"Redis gave no usable reply
"});
    }
    return (deliver);
}
