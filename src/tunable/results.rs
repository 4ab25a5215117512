//! TunableOp's results file: PyTorch's CSV layout. Validator lines name what the
//! choices were measured on (gpurt's version, the driver, the device), so a file
//! from another GPU or driver is ignored rather than trusted; then one line per
//! tuned problem: `op,signature,candidate,microseconds`. Written whole to a
//! temporary file and renamed over the old one, so a crash never leaves half a file.

use std::collections::BTreeMap;

use crate::error::{Error, Result, Status};

/// What a results file must have been measured on.
pub type Validators = BTreeMap<String, String>;

/// A tuned problem's choice.
#[derive(Debug, Clone, PartialEq)]
pub struct Choice {
    pub candidate: String,
    pub micros: f64,
}

/// Choices by (op, signature).
pub type Choices = BTreeMap<(String, String), Choice>;

/// What reading a file found: its choices, and the lines it skipped, with why.
#[derive(Debug, Default)]
pub struct Read {
    pub choices: Choices,
    pub skipped: Vec<String>,
}

/// A field of the CSV: commas and newlines cannot be stored, so they are refused
/// when a name or signature is registered (`check_field`).
pub fn check_field(what: &str, value: &str) -> Result<()> {
    if value.is_empty() || value.contains([',', '\n', '\r']) {
        return Err(Error::invalid_argument(format!("a TunableOp {what} must be non-empty, without commas or line breaks: {value:?}")));
    }
    Ok(())
}

/// Parses a results file. A validator that differs from `expected` (or one missing)
/// rejects the whole file with the reason; a malformed line is skipped and reported.
pub fn parse(text: &str, expected: &Validators) -> std::result::Result<Read, String> {
    let mut found = Validators::new();
    let mut read = Read::default();
    for (number, line) in text.lines().enumerate().filter(|(_, l)| !l.trim().is_empty()) {
        let fields: Vec<&str> = line.split(',').collect();
        match fields.as_slice() {
            ["Validator", key, value] => {
                found.insert(key.to_string(), value.to_string());
            }
            [op, signature, candidate, micros] => match micros.parse::<f64>() {
                Ok(micros) if micros.is_finite() && micros >= 0.0 => {
                    read.choices.insert((op.to_string(), signature.to_string()), Choice { candidate: candidate.to_string(), micros });
                }
                _ => read.skipped.push(format!("line {}: bad time {micros:?}", number + 1)),
            },
            _ => read.skipped.push(format!("line {}: expected 4 fields, got {}", number + 1, fields.len())),
        }
    }
    for (key, value) in expected {
        match found.get(key) {
            Some(v) if v == value => {}
            Some(v) => return Err(format!("measured with {key} {v}, this process has {value}")),
            None => return Err(format!("no {key} validator")),
        }
    }
    Ok(read)
}

/// The file's text for `choices` measured under `validators`.
pub fn render(validators: &Validators, choices: &Choices) -> String {
    let mut text = String::new();
    for (key, value) in validators {
        text += &format!("Validator,{key},{value}\n");
    }
    for ((op, signature), choice) in choices {
        text += &format!("{op},{signature},{},{:.3}\n", choice.candidate, choice.micros);
    }
    text
}

/// Writes `text` to `path` atomically (`files::write_atomically`: a new temporary
/// file beside it, flushed, renamed over it; a link planted anywhere is not followed).
pub fn write_atomically(path: &str, text: &str) -> Result<()> {
    crate::files::write_atomically(std::path::Path::new(path), text.as_bytes(), 0o644)
        .map_err(|e| Error::new(Status::GPURT_ERROR_INTERNAL, format!("writing the TunableOp results to {path}: {e}")))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn validators() -> Validators {
        [("GPURT_VERSION", "0.1.0"), ("DEVICE", "NVIDIA H100")].map(|(k, v)| (k.to_string(), v.to_string())).into_iter().collect()
    }

    #[test]
    fn results_round_trip() {
        let mut choices = Choices::new();
        choices.insert(("gemm".into(), "m=128 n=64 f16".into()), Choice { candidate: "tiled".into(), micros: 12.5 });
        choices.insert(("softmax".into(), "4096".into()), Choice { candidate: "warp".into(), micros: 3.25 });
        let text = render(&validators(), &choices);
        let read = parse(&text, &validators()).unwrap();
        assert_eq!(read.choices, choices);
        assert!(read.skipped.is_empty());
    }

    #[test]
    fn a_file_from_another_device_or_version_is_refused() {
        let text = render(&validators(), &Choices::new());
        let mut other = validators();
        other.insert("DEVICE".into(), "NVIDIA A100".into());
        assert!(parse(&text, &other).unwrap_err().contains("DEVICE NVIDIA H100, this process has NVIDIA A100"));
        let mut more = validators();
        more.insert("DRIVER".into(), "13000".into());
        assert!(parse(&text, &more).unwrap_err().contains("no DRIVER validator"));
    }

    #[test]
    fn corrupt_lines_are_reported_and_the_rest_is_kept() {
        let text = format!("{}gemm,sig,a,1.5\ntruncated,line\nsoftmax,s,b,fast\nsoftmax,s,b,-1\n\n", render(&validators(), &Choices::new()));
        let read = parse(&text, &validators()).unwrap();
        assert_eq!(read.choices.len(), 1);
        assert_eq!(read.skipped.len(), 3, "{:?}", read.skipped);
        assert!(read.skipped[0].contains("expected 4 fields") && read.skipped[1].contains("bad time"));
    }

    #[test]
    fn fields_with_separators_are_refused_and_writes_replace_whole_files() {
        assert!(check_field("signature", "a,b").is_err() && check_field("name", "").is_err() && check_field("name", "x\ny").is_err());
        assert!(check_field("signature", "m=1 n=2").is_ok());
        let dir = crate::files::ScratchDir::new("tunable");
        let path = dir.join("results.csv").to_string_lossy().into_owned();
        write_atomically(&path, "one\n").unwrap();
        write_atomically(&path, "two\n").unwrap();
        assert_eq!(std::fs::read_to_string(&path).unwrap(), "two\n");
        assert_eq!(std::fs::read_dir(&dir).unwrap().count(), 1, "no temporary file is left");
        assert!(write_atomically(&dir.join("missing/x.csv").to_string_lossy(), "x").is_err());
    }
}
