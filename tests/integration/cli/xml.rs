//! A small XML well-formedness checker, enough for the SVG plotters writes: only characters
//! XML 1.0 allows (no control character but tab and line ends, also by reference), nested,
//! matching tags, quoted attributes, known entities, one root.

pub struct Element {
    pub name: String,
    pub attrs: Vec<(String, String)>,
}

impl Element {
    pub fn attr(&self, name: &str) -> Option<&str> {
        self.attrs
            .iter()
            .find(|(k, _)| k == name)
            .map(|(_, v)| v.as_str())
    }
}

/// XML 1.0's Char production.
fn xml_char(c: char) -> bool {
    matches!(c, '\t' | '\n' | '\r' | '\u{20}'..='\u{d7ff}' | '\u{e000}'..='\u{fffd}' | '\u{10000}'..)
}

fn check_text(text: &str) -> Result<(), String> {
    let mut rest = text;
    while let Some(at) = rest.find('&') {
        let end = rest[at..].find(';').ok_or("unterminated entity")? + at;
        let entity = &rest[at + 1..end];
        let referred = |n: Option<u32>| n.and_then(char::from_u32).is_some_and(xml_char);
        let known = ["amp", "lt", "gt", "quot", "apos"].contains(&entity)
            || entity
                .strip_prefix('#')
                .is_some_and(|n| match n.strip_prefix('x') {
                    Some(hex) => referred(u32::from_str_radix(hex, 16).ok()),
                    None => referred(n.parse().ok()),
                });
        if !known {
            return Err(format!("unknown entity &{entity};"));
        }
        rest = &rest[end + 1..];
    }
    Ok(())
}

/// Every element, in document order.
pub fn parse(doc: &str) -> Result<Vec<Element>, String> {
    if let Some(c) = doc.chars().find(|c| !xml_char(*c)) {
        return Err(format!("{c:?} is no XML character"));
    }
    let mut elements = Vec::new();
    let mut open: Vec<String> = Vec::new();
    let mut roots = 0;
    let mut rest = doc;
    while let Some(lt) = rest.find('<') {
        let text = &rest[..lt];
        if open.is_empty() && !text.trim().is_empty() {
            return Err(format!("text outside the root: {text:?}"));
        }
        check_text(text)?;
        rest = &rest[lt..];
        if let Some(body) = rest.strip_prefix("<?") {
            rest = &body[body.find("?>").ok_or("unterminated <?")? + 2..];
            continue;
        }
        if let Some(body) = rest.strip_prefix("<!--") {
            rest = &body[body.find("-->").ok_or("unterminated comment")? + 3..];
            continue;
        }
        let gt = rest.find('>').ok_or("unterminated tag")?;
        let tag = &rest[1..gt];
        rest = &rest[gt + 1..];
        if let Some(name) = tag.strip_prefix('/') {
            match open.pop() {
                Some(o) if o == name.trim() => continue,
                o => return Err(format!("</{name}> closes {o:?}")),
            }
        }
        let (tag, empty) = match tag.strip_suffix('/') {
            Some(t) => (t, true),
            None => (tag, false),
        };
        let name_end = tag.find(char::is_whitespace).unwrap_or(tag.len());
        let name = &tag[..name_end];
        if name.is_empty()
            || !name
                .chars()
                .all(|c| c.is_alphanumeric() || "-_:".contains(c))
        {
            return Err(format!("bad tag name {name:?}"));
        }
        let mut attrs = Vec::new();
        let mut a = tag[name_end..].trim_start();
        while !a.is_empty() {
            let eq = a
                .find('=')
                .ok_or(format!("attribute without value in <{name}"))?;
            let key = a[..eq].trim().to_string();
            let quoted = a[eq + 1..].trim_start();
            let q = quoted.chars().next().filter(|c| *c == '"' || *c == '\'');
            let q = q.ok_or(format!("unquoted attribute {key} in <{name}"))?;
            let close = quoted[1..].find(q).ok_or("unterminated attribute")? + 1;
            let value = &quoted[1..close];
            if value.contains('<') {
                return Err(format!("< in attribute {key}"));
            }
            check_text(value)?;
            if attrs.iter().any(|(k, _)| *k == key) {
                return Err(format!("duplicate attribute {key} in <{name}"));
            }
            attrs.push((key, value.to_string()));
            a = quoted[close + 1..].trim_start();
        }
        if open.is_empty() {
            roots += 1;
        }
        elements.push(Element {
            name: name.to_string(),
            attrs,
        });
        if !empty {
            open.push(name.to_string());
        }
    }
    if !open.is_empty() || roots != 1 || !rest.trim().is_empty() {
        return Err(format!("{} unclosed, {roots} roots", open.len()));
    }
    Ok(elements)
}

/// The text content of every `<text>` element, unescaped.
pub fn texts(doc: &str) -> Vec<String> {
    doc.split("<text")
        .skip(1)
        .filter_map(|t| {
            let body = &t[t.find('>')? + 1..t.find("</text>")?];
            Some(
                body.trim()
                    .replace("&lt;", "<")
                    .replace("&gt;", ">")
                    .replace("&quot;", "\"")
                    .replace("&apos;", "'")
                    .replace("&amp;", "&"),
            )
        })
        .collect()
}

#[test]
fn the_checker_rejects_what_it_should() {
    assert!(parse("<a><b x=\"1\"/></a>").is_ok());
    assert!(parse("<a><b></a>").is_err());
    assert!(parse("<a x=1/>").is_err());
    assert!(parse("<a/><b/>").is_err());
    assert!(parse("<a>&nbsp;</a>").is_err());
    assert!(parse("<a>&amp;&#32;&#x20;</a>").is_ok());
    assert!(parse("<a>\u{1b}[2J</a>").is_err());
    assert!(parse("<a x=\"\u{7}\"/>").is_err());
    assert!(parse("<a>&#27;&#x1b;</a>").is_err());
    assert!(parse("<a>\u{fffe}</a>").is_err());
    assert!(parse("<a>\t\n\u{9b}é</a>").is_ok());
}
