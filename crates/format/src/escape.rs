//! Text that came from another process or file — command lines, host names, container ids,
//! group and GPU names, refusal lines, trace fields — made safe to show: shown, never
//! obeyed. A terminal acts on control characters (ESC `[2J` clears the screen, ESC `]0;…`
//! BEL sets the window title) and a log reader on newlines (a forged `cuquota[1]: …` line),
//! so every such character is written out as a visible escape instead, and nothing is
//! dropped silently:
//!
//! - `\n`, `\r`, `\t`; any other C0 control and DEL as `\x1b`;
//! - C1 controls (U+0080–U+009F: U+009B is a one-character CSI to some terminals),
//!   Unicode's bidirectional controls (which reorder what is shown around them), the line
//!   and paragraph separators and the non-characters U+FFFE and U+FFFF as `\u{9b}`;
//! - a byte that is not UTF-8 as `\xff` ([`from_utf8`], [`bytes`]).
//!
//! A backslash stays as it is, so that escaping is idempotent: text escaped where it was
//! stored and again where it is shown reads the same. (A literal `\x1b` in a command line
//! therefore looks like an escaped ESC: either way nothing is obeyed.)
//!
//! What these functions give is one line of printable characters, which are XML's too:
//! [`xml`] adds the five entities for an SVG. [`cut`] shortens escaped text to a width
//! without splitting an escape. JSON outputs need none of this: their encoder escapes.

use std::borrow::Cow;
use std::fmt::Write as _;

/// Whether `c` is shown as an escape rather than as itself.
fn escaped(c: char) -> bool {
    c.is_control() // C0, DEL and C1
        || matches!(
            c,
            '\u{061c}' // Arabic letter mark
                | '\u{200e}'..='\u{200f}' // left-to-right and right-to-left marks
                | '\u{2028}'..='\u{2029}' // line and paragraph separators
                | '\u{202a}'..='\u{202e}' // embeddings and overrides
                | '\u{2066}'..='\u{2069}' // isolates
                | '\u{fffe}'..='\u{ffff}' // not characters, and not allowed in XML
        )
}

fn push_escape(out: &mut String, c: char) {
    match c {
        '\n' => out.push_str("\\n"),
        '\r' => out.push_str("\\r"),
        '\t' => out.push_str("\\t"),
        c if (c as u32) < 0x80 => {
            let _ = write!(out, "\\x{:02x}", c as u32);
        }
        c => {
            let _ = write!(out, "\\u{{{:x}}}", c as u32);
        }
    }
}

/// `text` as it can be shown on one line: the characters the module names escaped, the
/// rest as they are (borrowed when there is nothing to escape).
pub fn text(text: &str) -> Cow<'_, str> {
    let Some(first) = text.find(escaped) else {
        return Cow::Borrowed(text);
    };
    let mut out = String::with_capacity(text.len() + 8);
    out.push_str(&text[..first]);
    for c in text[first..].chars() {
        if escaped(c) {
            push_escape(&mut out, c);
        } else {
            out.push(c);
        }
    }
    Cow::Owned(out)
}

/// `bytes` as UTF-8 with each byte that is not part of a valid character written `\xff`;
/// nothing else changed. [`String::from_utf8_lossy`], but a viewer can see which bytes were
/// there: for text that must become a `String` before it is stored (a command line, a
/// name read back from a shared file).
pub fn from_utf8(bytes: &[u8]) -> String {
    let mut out = String::with_capacity(bytes.len());
    for chunk in bytes.utf8_chunks() {
        out.push_str(chunk.valid());
        for b in chunk.invalid() {
            let _ = write!(out, "\\x{b:02x}");
        }
    }
    out
}

/// Bytes from elsewhere as they can be shown on one line: [`from_utf8`], then [`text`].
pub fn bytes(bytes: &[u8]) -> String {
    text(&from_utf8(bytes)).into_owned()
}

/// `text` for an SVG's text or attribute: [`text`] (which leaves only characters XML
/// allows), then `& < > " '` as entities.
pub fn xml(text: &str) -> String {
    let shown = self::text(text);
    let mut out = String::with_capacity(shown.len() + 8);
    for c in shown.chars() {
        match c {
            '&' => out.push_str("&amp;"),
            '<' => out.push_str("&lt;"),
            '>' => out.push_str("&gt;"),
            '"' => out.push_str("&quot;"),
            '\'' => out.push_str("&apos;"),
            c => out.push(c),
        }
    }
    out
}

/// The length in characters of the escape [`text`] or [`from_utf8`] wrote at the start of
/// `s` (which starts with a backslash), or 1 where none starts there.
fn escape_len(s: &str) -> usize {
    let b = s.as_bytes();
    match b.get(1) {
        Some(b'n' | b'r' | b't') => 2,
        Some(b'x') if b.len() >= 4 && b[2..4].iter().all(u8::is_ascii_hexdigit) => 4,
        Some(b'u') if b.get(2) == Some(&b'{') => {
            let digits = b[3..].iter().take_while(|d| d.is_ascii_hexdigit()).count();
            match b.get(3 + digits) {
                Some(b'}') if (1..=6).contains(&digits) => 4 + digits,
                _ => 1,
            }
        }
        _ => 1,
    }
}

/// Escaped text cut to at most `width` characters, the last one `…` when cut, on character
/// boundaries and never inside an escape (one that does not fit goes whole).
pub fn cut(escaped: &str, width: usize) -> String {
    if escaped.chars().count() <= width {
        return escaped.to_string();
    }
    let room = width.saturating_sub(1);
    let (mut out, mut used, mut rest) = (String::new(), 0, escaped);
    while let Some(c) = rest.chars().next() {
        // Escapes are ASCII: their length in characters is their length in bytes.
        let len = if c == '\\' { escape_len(rest) } else { 1 };
        if used + len > room {
            break;
        }
        let bytes = if c == '\\' { len } else { c.len_utf8() };
        out.push_str(&rest[..bytes]);
        rest = &rest[bytes..];
        used += len;
    }
    if width > 0 {
        out.push('…');
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    /// What a hostile command line holds: clear the screen, set the window title, a C1 CSI,
    /// and a forged log line after a newline.
    const HOSTILE: &str =
        "x\u{1b}[2J\u{1b}]0;owned\u{7}\u{9b}31m\ncuquota[1]: GPU 0 summary: all fine";

    #[test]
    fn controls_are_written_out() {
        assert_eq!(
            text(HOSTILE),
            "x\\x1b[2J\\x1b]0;owned\\x07\\u{9b}31m\\ncuquota[1]: GPU 0 summary: all fine"
        );
        assert_eq!(text("a\tb\rc\0d\u{7f}"), "a\\tb\\rc\\x00d\\x7f");
        assert_eq!(
            text("\u{202e}txt.exe\u{2028}\u{fffe}"),
            "\\u{202e}txt.exe\\u{2028}\\u{fffe}"
        );
    }

    #[test]
    fn plain_text_is_borrowed_unchanged() {
        for s in [
            "python train.py --lr 0.1",
            "Größe · 8 GiB …",
            "C:\\x1b",
            "日本語",
            "",
        ] {
            assert!(matches!(text(s), Cow::Borrowed(t) if t == s), "{s:?}");
        }
    }

    #[test]
    fn invalid_utf8_is_escaped_byte_by_byte() {
        assert_eq!(
            from_utf8(b"a\xffb\xc3\x28\xe2\x82"),
            "a\\xffb\\xc3(\\xe2\\x82"
        );
        // A C1 CSI as one raw byte is no UTF-8: escaped as a byte.
        assert_eq!(from_utf8(b"\x9b2J"), "\\x9b2J");
        // from_utf8 keeps control characters; bytes escapes them too.
        assert_eq!(from_utf8(b"a\nb\x1b"), "a\nb\x1b");
        assert_eq!(bytes(b"a\nb\x1b\xff\xc2\x9b"), "a\\nb\\x1b\\xff\\u{9b}");
        assert_eq!(from_utf8("é·€".as_bytes()), "é·€");
    }

    #[test]
    fn xml_escapes_the_five_and_the_controls() {
        assert_eq!(
            xml("<a href=\"x\">'&'</a>\u{1b}\u{0}\u{fffe}"),
            "&lt;a href=&quot;x&quot;&gt;&apos;&amp;&apos;&lt;/a&gt;\\x1b\\x00\\u{fffe}"
        );
    }

    #[test]
    fn cuts_keep_escapes_whole() {
        let s = text("ab\u{1b}cd");
        assert_eq!(s, "ab\\x1bcd");
        assert_eq!(cut(&s, 8), "ab\\x1bcd");
        assert_eq!(cut(&s, 7), "ab\\x1b…");
        // `\x1b` does not fit in front of the ellipsis: it goes whole.
        assert_eq!(cut(&s, 6), "ab…");
        assert_eq!(cut(&s, 3), "ab…");
        assert_eq!(cut(&s, 1), "…");
        assert_eq!(cut(&s, 0), "");
        assert_eq!(cut(&text("a\u{9b}b"), 8), "a\\u{9b}b");
        assert_eq!(cut(&text("a\u{9b}bc"), 8), "a\\u{9b}…");
        assert_eq!(cut(&text("a\u{9b}bc"), 7), "a…");
        assert_eq!(cut(&text("\n\nxyz"), 4), "\\n…");
        assert_eq!(cut("日本語テキスト", 4), "日本語…");
        // A backslash that starts no escape is one character.
        assert_eq!(cut("a\\qbcdef", 4), "a\\q…");
        assert_eq!(cut("a\\u{zz}bc", 4), "a\\u…");
    }

    /// XML 1.0's Char, less the tab and line ends.
    fn xml_char(c: char) -> bool {
        matches!(c, '\u{20}'..='\u{d7ff}' | '\u{e000}'..='\u{fffd}' | '\u{10000}'..)
    }

    /// Where escapes start and end in escaped text (byte ranges).
    fn escapes(s: &str) -> Vec<(usize, usize)> {
        let (mut out, mut at) = (Vec::new(), 0);
        while let Some(c) = s[at..].chars().next() {
            let len = match c {
                '\\' => escape_len(&s[at..]),
                c => c.len_utf8(),
            };
            if c == '\\' && len > 1 {
                out.push((at, at + len));
            }
            at += len;
        }
        out
    }

    proptest! {
        #[test]
        fn any_bytes_become_one_safe_line(raw in proptest::collection::vec(any::<u8>(), 0..64)) {
            let shown = bytes(&raw);
            prop_assert!(!shown.chars().any(escaped), "{shown:?}");
            // Idempotent: escaping again changes nothing.
            prop_assert_eq!(text(&shown), shown.as_str());
            // Nothing dropped: what was valid text is still there, in order.
            let kept: String = String::from_utf8_lossy(&raw)
                .chars()
                .filter(|c| !escaped(*c) && *c != '\u{fffd}')
                .collect();
            let left: String = shown.chars().filter(|c| *c != '\u{fffd}').collect();
            let mut it = left.chars();
            prop_assert!(kept.chars().all(|c| it.any(|d| d == c)), "{kept:?} in {left:?}");
        }

        #[test]
        fn any_string_escapes_idempotently(s in "\\PC*|[\\x00-\\x{a0}\\u{2028}\\u{202e}\\u{fffe}]{0,20}") {
            let once = text(&s).into_owned();
            prop_assert!(!once.chars().any(escaped));
            prop_assert_eq!(text(&once), once.as_str());
            let x = xml(&s);
            prop_assert!(!x.contains(['<', '>', '"', '\'']));
            prop_assert!(x.chars().all(xml_char), "{:?}", x);
        }

        #[test]
        fn cuts_fit_and_never_split_an_escape(
            s in "[a-z\\x00-\\x1f\\x7f\\u{80}-\\u{a0}é日]{0,30}",
            width in 0usize..40,
        ) {
            let shown = text(&s).into_owned();
            let short = cut(&shown, width);
            prop_assert!(short.chars().count() <= width);
            if shown.chars().count() <= width {
                prop_assert_eq!(&short, &shown);
            } else {
                let kept = short.strip_suffix('…').unwrap_or(&short);
                prop_assert!(shown.starts_with(kept));
                // The cut falls between escapes, never inside one.
                let at = kept.len();
                prop_assert!(escapes(&shown).iter().all(|&(a, b)| at <= a || at >= b), "{shown:?} cut at {at}");
            }
        }
    }
}
