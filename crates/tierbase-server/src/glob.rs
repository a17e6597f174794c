//! Redis's glob patterns (`SCAN … MATCH`, `CONFIG GET`): `*`, `?`, `[abc]`, `[^a]`, `[a-z]`
//! and `\x` escapes, over bytes.
//!
//! Owns: matching. Must not touch: anything else.

/// Whether `text` matches `pattern`.
pub fn glob_match(pattern: &[u8], text: &[u8]) -> bool {
    // Iterative with one backtrack point for the last `*`: linear in practice, and no
    // recursion a hostile pattern could drive deep.
    let (mut p, mut t) = (0usize, 0usize);
    let mut star: Option<(usize, usize)> = None;
    while t < text.len() {
        let Some(&c) = text.get(t) else { break };
        match pattern.get(p) {
            Some(b'*') => {
                star = Some((p, t));
                p += 1;
                continue;
            }
            Some(b'?') => {
                p += 1;
                t += 1;
                continue;
            }
            Some(b'[') => {
                let (matched, next) = class_match(pattern, p, c);
                if matched {
                    p = next;
                    t += 1;
                    continue;
                }
            }
            Some(b'\\') if pattern.get(p + 1) == Some(&c) => {
                p += 2;
                t += 1;
                continue;
            }
            Some(&l) if l != b'\\' && l == c => {
                p += 1;
                t += 1;
                continue;
            }
            Some(b'\\') if pattern.get(p + 1).is_none() && c == b'\\' => {
                p += 1;
                t += 1;
                continue;
            }
            _ => {}
        }
        // Mismatch: let the last star swallow one more byte, or fail.
        match star {
            Some((sp, st)) => {
                p = sp + 1;
                t = st + 1;
                star = Some((sp, st + 1));
            }
            None => return false,
        }
    }
    while pattern.get(p) == Some(&b'*') {
        p += 1;
    }
    p == pattern.len()
}

/// Matches byte `c` against the class starting at `pattern[start] == '['`: `(matched, index
/// after the class)`. As Redis's `stringmatchlen`: a class without its `]` runs to the end of
/// the pattern (`[ab` is `[ab]`, `[` matches nothing); `x-y` is a range whenever a byte
/// follows the `-`, even `]` (`[a-]` is the range `]`..`a`, unterminated); `\x` is `x`.
fn class_match(pattern: &[u8], start: usize, c: u8) -> (bool, usize) {
    let mut i = start + 1;
    let negate = pattern.get(i) == Some(&b'^');
    if negate {
        i += 1;
    }
    let mut matched = false;
    let end = loop {
        match (pattern.get(i), pattern.get(i + 1), pattern.get(i + 2)) {
            (None, _, _) => break pattern.len(),
            (Some(b'\\'), Some(&e), _) => {
                matched |= e == c;
                i += 2;
            }
            (Some(b']'), _, _) => break i + 1,
            (Some(&lo), Some(b'-'), Some(&hi)) => {
                let (lo, hi) = if lo <= hi { (lo, hi) } else { (hi, lo) };
                matched |= (lo..=hi).contains(&c);
                i += 3;
            }
            (Some(&l), _, _) => {
                matched |= l == c;
                i += 1;
            }
        }
    };
    (matched != negate, end)
}

#[cfg(test)]
mod tests {
    use super::glob_match;

    #[test]
    fn redis_glob_cases() {
        let yes: &[(&str, &str)] = &[
            ("*", ""),
            ("*", "anything"),
            ("h?llo", "hello"),
            ("h*llo", "heeeello"),
            ("h[ae]llo", "hallo"),
            ("h[^e]llo", "hallo"),
            ("h[a-b]llo", "hbllo"),
            ("key:*", "key:000123"),
            ("*:1?", "user:12"),
            ("a\\*b", "a*b"),
            ("[a", "a"),
            ("x[abc", "xb"),
            ("[a-]", "_"),
            ("[a-]", "]"),
            ("[^", "z"),
            ("[\\", "\\"),
            ("*a*b*c*", "xxaxxbxxc"),
        ];
        let no: &[(&str, &str)] = &[
            ("h?llo", "hllo"),
            ("h[ae]llo", "hillo"),
            ("h[^e]llo", "hello"),
            ("h[a-b]llo", "hcllo"),
            ("key:*", "kex:1"),
            ("a\\*b", "axb"),
            ("abc", "abcd"),
            ("[", "["),
            ("[a", "["),
            ("[a-]", "-"),
            ("[a-]", "b"),
            ("[]", "]"),
            ("*a*b*c", "xxaxxbxxcx"),
        ];
        for (p, t) in yes {
            assert!(
                glob_match(p.as_bytes(), t.as_bytes()),
                "{p} should match {t}"
            );
        }
        for (p, t) in no {
            assert!(
                !glob_match(p.as_bytes(), t.as_bytes()),
                "{p} should not match {t}"
            );
        }
    }

    #[test]
    fn hostile_patterns_end_quickly() {
        let pattern = "*a".repeat(200) + "b";
        let text = "a".repeat(5000);
        assert!(!glob_match(pattern.as_bytes(), text.as_bytes()));
    }
}
