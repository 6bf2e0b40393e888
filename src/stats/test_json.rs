//! A minimal JSON reader for the stats tests, enough to prove the
//! output is well-formed without a serde dependency.
use std::collections::BTreeMap;

#[derive(Debug, PartialEq)]
pub(super) enum Json {
    Num(u64),
    Bool(bool),
    Str(String),
    Arr(Vec<Json>),
    Obj(Vec<(String, Json)>),
}

struct Reader<'a> {
    text: &'a [u8],
    pos: usize,
}

impl Reader<'_> {
    fn peek(&mut self) -> u8 {
        while self
            .text
            .get(self.pos)
            .is_some_and(|b| b" \t\r\n".contains(b))
        {
            self.pos += 1;
        }
        *self.text.get(self.pos).expect("unexpected end of JSON")
    }

    fn eat(&mut self, want: u8) {
        assert_eq!(self.peek() as char, want as char, "at byte {}", self.pos);
        self.pos += 1;
    }

    fn value(&mut self) -> Json {
        match self.peek() {
            b'{' => {
                self.eat(b'{');
                let mut members: Vec<(String, Json)> = Vec::new();
                if self.peek() == b'}' {
                    self.pos += 1;
                    return Json::Obj(members);
                }
                loop {
                    let key = self.string();
                    assert!(
                        members.iter().all(|(k, _)| *k != key),
                        "duplicate key {key}"
                    );
                    self.eat(b':');
                    members.push((key, self.value()));
                    if self.peek() == b'}' {
                        self.pos += 1;
                        return Json::Obj(members);
                    }
                    self.eat(b',');
                }
            }
            b'[' => {
                self.eat(b'[');
                let mut items = Vec::new();
                if self.peek() == b']' {
                    self.pos += 1;
                    return Json::Arr(items);
                }
                loop {
                    items.push(self.value());
                    if self.peek() == b']' {
                        self.pos += 1;
                        return Json::Arr(items);
                    }
                    self.eat(b',');
                }
            }
            b'"' => Json::Str(self.string()),
            b't' | b'f' => {
                for (word, value) in [("true", true), ("false", false)] {
                    if self.text[self.pos..].starts_with(word.as_bytes()) {
                        self.pos += word.len();
                        return Json::Bool(value);
                    }
                }
                panic!("bad literal at byte {}", self.pos)
            }
            b'0'..=b'9' => {
                let start = self.pos;
                while self.text.get(self.pos).is_some_and(u8::is_ascii_digit) {
                    self.pos += 1;
                }
                let digits = std::str::from_utf8(&self.text[start..self.pos]).unwrap();
                assert!(digits == "0" || !digits.starts_with('0'), "leading zero");
                Json::Num(digits.parse().unwrap())
            }
            other => panic!("unexpected {:?} at byte {}", other as char, self.pos),
        }
    }

    fn string(&mut self) -> String {
        self.eat(b'"');
        let mut out = Vec::new();
        loop {
            let b = self.text[self.pos];
            self.pos += 1;
            match b {
                b'"' => return String::from_utf8(out).unwrap(),
                b'\\' => {
                    let e = self.text[self.pos];
                    self.pos += 1;
                    let ch = match e {
                        b'"' => '"',
                        b'\\' => '\\',
                        b'/' => '/',
                        b'n' => '\n',
                        b'r' => '\r',
                        b't' => '\t',
                        b'u' => {
                            let hex = std::str::from_utf8(&self.text[self.pos..self.pos + 4]);
                            self.pos += 4;
                            char::from_u32(u32::from_str_radix(hex.unwrap(), 16).unwrap()).unwrap()
                        }
                        _ => panic!("bad escape"),
                    };
                    out.extend_from_slice(ch.to_string().as_bytes());
                }
                0..=0x1f => panic!("raw control character in string"),
                _ => out.push(b),
            }
        }
    }
}

pub(super) fn parse_json(text: &str) -> Json {
    let mut reader = Reader {
        text: text.as_bytes(),
        pos: 0,
    };
    let value = reader.value();
    assert!(
        reader.text[reader.pos..]
            .iter()
            .all(u8::is_ascii_whitespace),
        "trailing bytes"
    );
    value
}

/// Dotted paths of the leaves below nested objects.
pub(super) fn flatten(value: &Json) -> BTreeMap<String, &Json> {
    fn walk<'a>(prefix: &str, value: &'a Json, out: &mut BTreeMap<String, &'a Json>) {
        match value {
            Json::Obj(members) => {
                for (key, child) in members {
                    let path = if prefix.is_empty() {
                        key.clone()
                    } else {
                        format!("{prefix}.{key}")
                    };
                    walk(&path, child, out);
                }
            }
            leaf => {
                out.insert(prefix.to_owned(), leaf);
            }
        }
    }
    let mut out = BTreeMap::new();
    walk("", value, &mut out);
    out
}
