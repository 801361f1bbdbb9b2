//! Text that came from others and will be shown to people or compared: Unicode NFC, and the
//! characters that are invisible or reorder what is shown (controls, bidi overrides, zero-width
//! characters, line separators).
//!
//! The Unicode data comes from ICU4X (`icu_normalizer`, `icu_properties`), already in the build
//! through `url`'s IDNA support, rather than from hand-kept tables.

use std::borrow::Cow;
use std::fmt::Write as _;

use icu_normalizer::ComposingNormalizerBorrowed;
use icu_properties::props::GeneralCategory;
use icu_properties::CodePointMapData;

/// Whether `c` is a character that shows nothing or changes how its neighbours are shown:
/// general category Cc (controls: C0, DEL, C1), Cf (format: bidi embeddings, overrides and
/// isolates U+202A–U+202E and U+2066–U+2069, marks U+200E/U+200F/U+061C, zero-width U+200B–U+200D,
/// U+2060, U+FEFF, soft hyphen, tag characters), Zl and Zp (U+2028, U+2029).
pub fn is_hidden(c: char) -> bool {
    matches!(
        CodePointMapData::<GeneralCategory>::new().get(c),
        GeneralCategory::Control
            | GeneralCategory::Format
            | GeneralCategory::LineSeparator
            | GeneralCategory::ParagraphSeparator
    )
}

/// The first character of `s` that would hide text or change how the text around it is shown,
/// if any: [`is_hidden`], less tab, line feed and carriage return, which are how text is laid
/// out (a card's description keeps its paragraphs). What a card's text may not hold.
pub fn first_hiding(s: &str) -> Option<char> {
    s.chars()
        .find(|&c| !matches!(c, '\t' | '\n' | '\r') && is_hidden(c))
}

/// `s` in Unicode Normalization Form C (borrowed when it already is).
pub fn nfc(s: &str) -> Cow<'_, str> {
    ComposingNormalizerBorrowed::new_nfc().normalize(s)
}

/// `s` made safe to print on a terminal or a web page as plain text: every [`is_hidden`]
/// character and every backslash is written as a Rust-style escape (`\u{202e}`, `\n`, `\\`), so
/// that no input can move the cursor, clear the screen, reverse the text after it or hide
/// characters. Borrowed when there is nothing to escape.
pub fn sanitize(s: &str) -> Cow<'_, str> {
    if !s.chars().any(|c| c == '\\' || is_hidden(c)) {
        return Cow::Borrowed(s);
    }
    let mut out = String::with_capacity(s.len() + 8);
    for c in s.chars() {
        match c {
            '\\' => out.push_str("\\\\"),
            '\n' => out.push_str("\\n"),
            '\r' => out.push_str("\\r"),
            '\t' => out.push_str("\\t"),
            c if is_hidden(c) => {
                let _ = write!(out, "\\u{{{:x}}}", c as u32);
            }
            c => out.push(c),
        }
    }
    Cow::Owned(out)
}

/// The first `n` characters of `s`, with `…` if it had more.
pub fn shorten(s: &str, n: usize) -> String {
    match s.char_indices().nth(n) {
        None => s.to_owned(),
        Some((end, _)) => {
            let mut out = String::with_capacity(end + '…'.len_utf8());
            out.push_str(&s[..end]);
            out.push('…');
            out
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn hidden_characters_are_the_ones_that_deceive() {
        for c in [
            '\0',
            '\n',
            '\x1b',
            '\x7f',
            '\u{85}',
            '\u{9b}',
            '\u{ad}',
            '\u{61c}',
            '\u{200b}',
            '\u{200c}',
            '\u{200d}',
            '\u{200e}',
            '\u{200f}',
            '\u{2028}',
            '\u{2029}',
            '\u{202a}',
            '\u{202b}',
            '\u{202c}',
            '\u{202d}',
            '\u{202e}',
            '\u{2060}',
            '\u{2066}',
            '\u{2067}',
            '\u{2068}',
            '\u{2069}',
            '\u{feff}',
            '\u{e0041}',
        ] {
            assert!(is_hidden(c), "U+{:04X}", c as u32);
        }
        for c in ['a', ' ', 'é', 'ß', '中', '🦀', '\u{301}', '-'] {
            assert!(!is_hidden(c), "U+{:04X}", c as u32);
        }
    }

    #[test]
    fn nfc_composes() {
        assert_eq!(nfc("e\u{301}"), "é");
        assert!(matches!(nfc("plain"), Cow::Borrowed(_)));
    }

    #[test]
    fn sanitize_escapes_what_a_terminal_would_obey() {
        assert!(matches!(sanitize("did:web:example.com"), Cow::Borrowed(_)));
        assert_eq!(
            sanitize("evil\x1b[2J\u{202e}txt.exe\n\\"),
            "evil\\u{1b}[2J\\u{202e}txt.exe\\n\\\\"
        );
        // Escaping is reversible in the sense that two different inputs never print the same.
        assert_ne!(sanitize("\\u{202e}"), sanitize("\u{202e}"));
    }

    proptest::proptest! {
        #[test]
        fn sanitized_text_has_no_hidden_characters(s in "\\PC*|[\\x00-\\x1f\u{200b}-\u{200f}\u{202a}-\u{202e}a]*") {
            proptest::prop_assert!(!sanitize(&s).chars().any(is_hidden));
        }
    }
}
