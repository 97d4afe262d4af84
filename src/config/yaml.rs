//! YAML to typed structs, with errors that say where: origin (file), line,
//! column and the field path (`workloads[1].max_replicas`).

use std::fmt;

use serde::de::DeserializeOwned;

/// A YAML document that does not fit its schema: bad syntax, a wrong type,
/// an unknown or missing key.
#[derive(Debug, Clone, PartialEq)]
pub struct YamlError {
    pub(crate) origin: String,
    pub(crate) line: Option<usize>,
    pub(crate) column: Option<usize>,
    /// Dotted path of the field at fault; empty at the document root.
    pub(crate) field: String,
    pub(crate) message: String,
}

impl fmt::Display for YamlError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}", self.origin)?;
        if let Some(line) = self.line {
            write!(f, ":{line}")?;
            if let Some(col) = self.column {
                write!(f, ":{col}")?;
            }
        }
        if !self.field.is_empty() {
            write!(f, ": {}", self.field)?;
        }
        write!(f, ": {}", self.message)
    }
}

impl std::error::Error for YamlError {}

/// Parse `text` as a `T`, naming `origin` in any error.
pub(crate) fn parse<T: DeserializeOwned>(text: &str, origin: &str) -> Result<T, YamlError> {
    let de = serde_yaml_ng::Deserializer::from_str(text);
    serde_path_to_error::deserialize(de).map_err(|e| {
        let field = match e.path().to_string() {
            p if p == "." => String::new(),
            p => p,
        };
        let inner = e.into_inner();
        let location = inner.location();
        let mut message = inner.to_string();
        // serde_yaml_ng appends "at line L column C"; we print the location up front instead.
        if let Some(i) = message.find(" at line ") {
            message.truncate(i);
        }
        // serde_yaml_ng may prefix its own (shorter) path: ours is printed already.
        if let Some((head, rest)) = message.split_once(": ") {
            if !head.is_empty() && !head.contains(' ') && field.starts_with(head) {
                message = rest.to_string();
            }
        }
        YamlError {
            origin: origin.to_string(),
            line: location.as_ref().map(|l| l.line()),
            column: location.as_ref().map(|l| l.column()),
            field,
            message,
        }
    })
}
