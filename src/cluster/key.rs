//! Which argument of a command is the key that routes it, by the C VMOD's
//! rule: the first argument, the third for `EVAL` / `EVALSHA` (the first
//! key after the script and the key count). Commands without one go to any
//! node.
use crate::command::Command;

/// `EVAL` or `EVALSHA`, any case: always sent to a master (Redis Cluster
/// takes scripts as writes; the C VMOD forces `master=true` for them).
pub(crate) fn is_script(command: &Command) -> bool {
    let name = command.name();
    name.eq_ignore_ascii_case(b"EVAL") || name.eq_ignore_ascii_case(b"EVALSHA")
}

/// The key that routes `command`, if it has one.
pub(crate) fn command_key(command: &Command) -> Option<&[u8]> {
    command.arg(if is_script(command) { 3 } else { 1 })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn command(args: &[&str]) -> Command {
        let mut c = Command::new(args[0].as_bytes());
        for arg in &args[1..] {
            c.push(arg.as_bytes());
        }
        c
    }

    #[test]
    fn first_argument_is_the_key() {
        assert_eq!(command_key(&command(&["GET", "k"])), Some(&b"k"[..]));
        assert_eq!(command_key(&command(&["SET", "k2", "v"])), Some(&b"k2"[..]));
        assert_eq!(command_key(&command(&["PING"])), None);
    }

    #[test]
    fn scripts_use_the_third_argument() {
        let eval = command(&["eval", "return 1", "1", "{t}a", "x"]);
        assert!(is_script(&eval));
        assert_eq!(command_key(&eval), Some(&b"{t}a"[..]));
        let sha = command(&["EVALSHA", "abc", "1", "kk"]);
        assert_eq!(command_key(&sha), Some(&b"kk"[..]));
        // No key (numkeys 0 and nothing after): any node.
        assert_eq!(command_key(&command(&["EVAL", "return 1", "0"])), None);
        assert!(!is_script(&command(&["GET", "EVAL"])));
    }
}
