//! Sprig's `semver` and `semverCompare` over [`crate::semver`] (Masterminds' rules): a parsed
//! version as a template value has Sprig's `.Major .Minor .Patch .Prerelease .Metadata .Original`
//! and prints as the normalised version.

use std::cmp::Ordering;
use std::fmt;
use std::sync::Arc;

use minijinja::value::{Object, ObjectRepr, Value};
use minijinja::{Error, ErrorKind};

pub use crate::semver::Version;
use crate::semver::{Range, SemverError};

fn err(msg: impl Into<String>) -> Error {
    Error::new(ErrorKind::InvalidOperation, msg.into())
}

fn from_semver(e: SemverError) -> Error {
    err(e.0)
}

impl Version {
    /// The methods charts call on a `semver` result: `Compare`, `LessThan`, `GreaterThan`, `Equal`.
    pub fn method(&self, name: &str, args: &[Value]) -> Result<Value, Error> {
        let other = || -> Result<Arc<Version>, Error> {
            match args {
                [o] => o.downcast_object::<Version>().ok_or_else(|| {
                    err(format!(
                        "wrong type for value; expected *semver.Version in call to {name}"
                    ))
                }),
                _ => Err(err(format!(
                    "wrong number of args for {name}: want 1 got {}",
                    args.len()
                ))),
            }
        };
        if !matches!(name, "Compare" | "LessThan" | "GreaterThan" | "Equal") {
            return Err(err(format!(
                "unsupported construct: method call .{name} on *semver.Version"
            )));
        }
        let o: Arc<Version> = other()?;
        let ord = self.compare(o.as_ref());
        Ok(match name {
            "Compare" => Value::from(match ord {
                Ordering::Less => -1,
                Ordering::Equal => 0,
                Ordering::Greater => 1,
            }),
            "LessThan" => Value::from(ord == Ordering::Less),
            "GreaterThan" => Value::from(ord == Ordering::Greater),
            _ => Value::from(ord == Ordering::Equal),
        })
    }
}

/// A Kubernetes version as helm's `--kube-version` reads it (`chartutil.ParseKubeVersion`): any
/// semantic version, with or without a leading `v`, normalised to `v<major>.<minor>.<patch>`
/// (`1.35` is `v1.35.0`).
pub fn kube_version(s: &str) -> Result<String, String> {
    Version::parse(s.trim())
        .map(|v| format!("v{v}"))
        .map_err(|_| format!("{s:?} is not a Kubernetes version (expected e.g. 1.35.4 or v1.35.4)"))
}

impl Object for Version {
    fn repr(self: &Arc<Self>) -> ObjectRepr {
        ObjectRepr::Plain
    }
    fn get_value(self: &Arc<Self>, key: &Value) -> Option<Value> {
        Some(match key.as_str()? {
            // uint64s (see `value::numbers`: a 128-bit unsigned integer stands for one).
            "Major" => Value::from(u128::from(self.major)),
            "Minor" => Value::from(u128::from(self.minor)),
            "Patch" => Value::from(u128::from(self.patch)),
            "Prerelease" => Value::from(self.pre.as_str()),
            "Metadata" => Value::from(self.meta.as_str()),
            "Original" => Value::from(self.original.as_str()),
            _ => return None,
        })
    }
    fn render(self: &Arc<Self>, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Display::fmt(self.as_ref(), f)
    }
}

/// `semver "1.2.3"`.
pub fn semver(s: &str) -> Result<Value, Error> {
    Ok(Value::from_object(Version::parse(s).map_err(from_semver)?))
}

/// `semverCompare "<constraint>" "<version>"`.
pub fn semver_compare(constraint: &str, version: &str) -> Result<bool, Error> {
    let range = Range::parse(constraint).map_err(from_semver)?;
    let v = Version::parse(version).map_err(from_semver)?;
    Ok(range.matches(&v))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rejects_bad_input() {
        assert!(semver_compare(">=1.2", "banana").is_err());
        assert!(semver_compare(">=banana", "1.2.3").is_err());
        assert!(semver_compare("", "1.2.3").is_err());
    }

    #[test]
    fn semver_constraints() {
        let check = semver_compare;
        assert!(check(">=1.19-0", "v1.30.0").unwrap());
        assert!(!check("<1.19", "1.30.0").unwrap());
        assert!(!check(">=1.19", "1.30.0-beta.1").unwrap());
    }
}
