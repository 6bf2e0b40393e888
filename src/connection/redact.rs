//! What may reach a log of a server's refusal: Redis quotes the
//! arguments of a command it does not know, and those of `HELLO` / `AUTH`
//! hold the password.
/// Why a handshake was refused, without the server's text: an error reply
/// to `HELLO` or `AUTH` may quote the command, password included (`ERR
/// unknown command 'HELLO', with args beginning with: ...`). Only its code
/// (the first word, when it is one: `WRONGPASS`, `NOAUTH`, `ERR`) is kept.
pub(super) fn refusal(text: &str) -> String {
    let code = text
        .split(' ')
        .next()
        .filter(|code| (1..=32).contains(&code.len()))
        .filter(|code| code.bytes().all(|b| b.is_ascii_uppercase()))
        .unwrap_or("error");
    let what = if code == "WRONGPASS" || text.contains("invalid password") {
        "authentication failed"
    } else {
        "handshake refused"
    };
    format!("{what} ({code} reply; its text is not shown as it may quote the password)")
}

/// An error reply as it may be logged: Redis quotes the arguments of a
/// command it does not know (`ERR unknown command 'HELLO', with args
/// beginning with: '3' 'AUTH' 'default' '<password>'`), and those may be
/// secrets; the quote is cut.
pub(crate) fn loggable_error(text: &str) -> &str {
    match text.find(", with args beginning with:") {
        Some(at) => &text[..at],
        None => text,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn server_text_that_may_quote_a_password_is_not_shown() {
        let hello =
            "ERR unknown command 'HELLO', with args beginning with: '3' 'AUTH' 'default' 'pw' ";
        assert_eq!(loggable_error(hello), "ERR unknown command 'HELLO'");
        assert_eq!(loggable_error("WRONGTYPE Operation"), "WRONGTYPE Operation");
        assert_eq!(
            refusal(hello),
            "handshake refused (ERR reply; its text is not shown as it may quote the password)"
        );
        assert_eq!(
            refusal("WRONGPASS invalid username-password pair or user is disabled."),
            "authentication failed (WRONGPASS reply; its text is not shown as it may quote the password)"
        );
        assert!(refusal("'pw' is wrong").starts_with("handshake refused (error reply"));
    }
}
