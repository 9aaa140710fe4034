//! Text meant for a terminal: object text (condition messages, reasons, names, errors quoted
//! from servers and charts) may hold control characters and ANSI escape sequences that would
//! move the cursor, rewrite what was printed before or change the terminal's title. They are
//! printed escaped (`\x1b`, `\u{202e}`); line feeds and tabs are kept. Machine output
//! (`-o json`, `-o yaml`, rendered manifests) is never escaped: it is data.

use std::borrow::Cow;

/// Whether `c` would act on a terminal instead of being shown: C0 controls other than line feed
/// and tab, DEL, C1 controls, and the Unicode bidirectional overrides and isolates (which
/// reorder what follows them on the line).
fn acts_on_terminal(c: char) -> bool {
    match c {
        '\n' | '\t' => false,
        '\u{0}'..='\u{1f}' | '\u{7f}'..='\u{9f}' => true,
        '\u{202a}'..='\u{202e}' | '\u{2066}'..='\u{2069}' => true,
        _ => false,
    }
}

/// `text` with every character that would act on a terminal written as an escape.
pub fn escape(text: &str) -> Cow<'_, str> {
    if !text.chars().any(acts_on_terminal) {
        return Cow::Borrowed(text);
    }
    let mut out = String::with_capacity(text.len() + 8);
    for c in text.chars() {
        if !acts_on_terminal(c) {
            out.push(c);
        } else if (c as u32) < 0x80 {
            out.push_str(&format!("\\x{:02x}", c as u32));
        } else {
            out.push_str(&format!("\\u{{{:x}}}", c as u32));
        }
    }
    Cow::Owned(out)
}

/// Prints `text` on stdout, escaped for a terminal.
macro_rules! tprintln {
    ($($arg:tt)*) => {
        println!("{}", $crate::cli::terminal::escape(&format!($($arg)*)))
    };
}

/// Prints `text` on stdout without a newline, escaped for a terminal.
macro_rules! tprint {
    ($($arg:tt)*) => {
        print!("{}", $crate::cli::terminal::escape(&format!($($arg)*)))
    };
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn controls_and_escapes_are_shown_not_acted_on() {
        assert_eq!(escape("plain text\n\tindented"), "plain text\n\tindented");
        assert!(matches!(escape("plain"), Cow::Borrowed(_)));
        assert_eq!(
            escape("ok\x1b[2J\x1b]0;title\x07\rback\u{202e}rev\u{9b}"),
            "ok\\x1b[2J\\x1b]0;title\\x07\\x0dback\\u{202e}rev\\u{9b}"
        );
        assert_eq!(escape("del\x7f"), "del\\x7f");
        assert_eq!(escape("émoji ✓"), "émoji ✓");
    }
}
