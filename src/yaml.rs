//! Reading YAML input files: one place that caps their nesting before the parser sees them.

use serde::de::DeserializeOwned;

use crate::Error;

/// The deepest nesting of flow collections (`[...]`, `{...}`) read. The parser refuses past 128
/// levels too, but only after work that grows with the square of the depth (half a minute for a
/// 200 KB file of brackets); no collsim file needs more than a handful.
pub const MAX_NESTING: usize = 64;

/// Parses YAML `text` read from `file` (named in errors), refusing deep nesting up front.
pub fn from_str<T: DeserializeOwned>(file: &str, text: &str) -> Result<T, Error> {
    check_nesting(file, text)?;
    serde_yaml::from_str(text).map_err(|e| Error::input(format!("{file}: {e}")))
}

/// Refuses flow collections nested deeper than [`MAX_NESTING`], naming where. Brackets inside
/// quoted strings and comments do not count.
fn check_nesting(file: &str, text: &str) -> Result<(), Error> {
    let mut depth = 0usize;
    let mut quote: Option<char> = None;
    for (row, line) in text.lines().enumerate() {
        let mut chars = line.chars().enumerate();
        let mut before = ' ';
        while let Some((column, ch)) = chars.next() {
            match quote {
                Some('"') if ch == '\\' => {
                    chars.next();
                }
                Some(q) if ch == q => quote = None,
                Some(_) => {}
                None => match ch {
                    '#' if before.is_whitespace() => break,
                    '"' | '\'' => quote = Some(ch),
                    '[' | '{' => {
                        depth += 1;
                        if depth > MAX_NESTING {
                            return Err(Error::input(format!(
                                "{file}: line {} column {}: nested deeper than {MAX_NESTING} \
                                 levels",
                                row + 1,
                                column + 1
                            )));
                        }
                    }
                    ']' | '}' => depth = depth.saturating_sub(1),
                    _ => {}
                },
            }
            before = ch;
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn deep_nesting_is_refused_where_it_passes_the_limit() {
        let deep = format!("dims: {}{}", "[".repeat(100_000), "]".repeat(100_000));
        let started = std::time::Instant::now();
        let err = from_str::<serde_yaml::Value>("f.yml", &deep).unwrap_err();
        assert!(started.elapsed().as_secs() < 1);
        assert_eq!(
            err.to_string(),
            format!(
                "f.yml: line 1 column {}: nested deeper than 64 levels",
                6 + 65
            )
        );
        let at_limit = format!("a: {}1{}", "[".repeat(64), "]".repeat(64));
        from_str::<serde_yaml::Value>("f.yml", &at_limit).unwrap();
    }

    #[test]
    fn brackets_in_strings_and_comments_do_not_count() {
        let many = "[".repeat(100);
        let text = format!("a: \"{many}\"\nb: '{many}'\nc: 1 # {many}\nd: \"\\\"{many}\"\n");
        let value: serde_yaml::Value = from_str("f.yml", &text).unwrap();
        assert_eq!(value["a"].as_str(), Some(many.as_str()));
    }
}
