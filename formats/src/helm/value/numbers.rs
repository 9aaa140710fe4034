//! Go's number types behind template numbers. Template literals, `len`, `atoi` and `int` give
//! `int`; Sprig's arithmetic (`add`, `sub`, `max`, `int64`, ...) gives `int64`; semver's
//! `.Major` gives `uint64`; values files give `float64`. The types decide what a function
//! accepts (`duration` reads an int64, and an int gives `0s`; a parameter declared `int`
//! refuses an int64) and what `typeOf` prints, so values keep them apart: an `int64` is held as
//! minijinja's 128-bit signed integer and a `uint64` as its 128-bit unsigned one (nothing else
//! makes those), and read back through the value's `serde` form.

use minijinja::value::{Value, ValueKind};
use serde::ser::{Impossible, Serialize, Serializer};

/// The Go type of a number value.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum GoNumber {
    /// `int`.
    Int,
    /// `int64`.
    Int64,
    /// `uint64`.
    Uint64,
    /// `float64`.
    Float64,
}

/// An `int64` (Sprig's arithmetic and conversions).
pub fn go_int64(n: i64) -> Value {
    Value::from(i128::from(n))
}

/// A `uint64` (semver's version parts).
pub fn go_uint64(n: u64) -> Value {
    Value::from(u128::from(n))
}

/// The Go type of `v`, `None` when it is not a number.
pub fn number_type(v: &Value) -> Option<GoNumber> {
    if v.kind() != ValueKind::Number {
        return None;
    }
    if !v.is_integer() {
        return Some(GoNumber::Float64);
    }
    v.serialize(Probe).ok()
}

/// A serializer that only says which number it was given.
struct Probe;

/// Anything but a number.
#[derive(Debug)]
struct NotANumber;

impl std::fmt::Display for NotANumber {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("not a number")
    }
}

impl std::error::Error for NotANumber {}

impl serde::ser::Error for NotANumber {
    fn custom<T: std::fmt::Display>(_: T) -> Self {
        NotANumber
    }
}

type No = Result<Impossible<GoNumber, NotANumber>, NotANumber>;

impl Serializer for Probe {
    type Ok = GoNumber;
    type Error = NotANumber;
    type SerializeSeq = Impossible<GoNumber, NotANumber>;
    type SerializeTuple = Impossible<GoNumber, NotANumber>;
    type SerializeTupleStruct = Impossible<GoNumber, NotANumber>;
    type SerializeTupleVariant = Impossible<GoNumber, NotANumber>;
    type SerializeMap = Impossible<GoNumber, NotANumber>;
    type SerializeStruct = Impossible<GoNumber, NotANumber>;
    type SerializeStructVariant = Impossible<GoNumber, NotANumber>;

    fn serialize_i64(self, _: i64) -> Result<GoNumber, NotANumber> {
        Ok(GoNumber::Int)
    }
    fn serialize_u64(self, _: u64) -> Result<GoNumber, NotANumber> {
        Ok(GoNumber::Int)
    }
    fn serialize_i128(self, _: i128) -> Result<GoNumber, NotANumber> {
        Ok(GoNumber::Int64)
    }
    fn serialize_u128(self, _: u128) -> Result<GoNumber, NotANumber> {
        Ok(GoNumber::Uint64)
    }
    fn serialize_f64(self, _: f64) -> Result<GoNumber, NotANumber> {
        Ok(GoNumber::Float64)
    }
    fn serialize_i8(self, _: i8) -> Result<GoNumber, NotANumber> {
        Ok(GoNumber::Int)
    }
    fn serialize_i16(self, _: i16) -> Result<GoNumber, NotANumber> {
        Ok(GoNumber::Int)
    }
    fn serialize_i32(self, _: i32) -> Result<GoNumber, NotANumber> {
        Ok(GoNumber::Int)
    }
    fn serialize_u8(self, _: u8) -> Result<GoNumber, NotANumber> {
        Ok(GoNumber::Int)
    }
    fn serialize_u16(self, _: u16) -> Result<GoNumber, NotANumber> {
        Ok(GoNumber::Int)
    }
    fn serialize_u32(self, _: u32) -> Result<GoNumber, NotANumber> {
        Ok(GoNumber::Int)
    }
    fn serialize_f32(self, _: f32) -> Result<GoNumber, NotANumber> {
        Ok(GoNumber::Float64)
    }
    fn serialize_bool(self, _: bool) -> Result<GoNumber, NotANumber> {
        Err(NotANumber)
    }
    fn serialize_char(self, _: char) -> Result<GoNumber, NotANumber> {
        Err(NotANumber)
    }
    fn serialize_str(self, _: &str) -> Result<GoNumber, NotANumber> {
        Err(NotANumber)
    }
    fn serialize_bytes(self, _: &[u8]) -> Result<GoNumber, NotANumber> {
        Err(NotANumber)
    }
    fn serialize_none(self) -> Result<GoNumber, NotANumber> {
        Err(NotANumber)
    }
    fn serialize_some<T: ?Sized + Serialize>(self, _: &T) -> Result<GoNumber, NotANumber> {
        Err(NotANumber)
    }
    fn serialize_unit(self) -> Result<GoNumber, NotANumber> {
        Err(NotANumber)
    }
    fn serialize_unit_struct(self, _: &'static str) -> Result<GoNumber, NotANumber> {
        Err(NotANumber)
    }
    fn serialize_unit_variant(
        self,
        _: &'static str,
        _: u32,
        _: &'static str,
    ) -> Result<GoNumber, NotANumber> {
        Err(NotANumber)
    }
    fn serialize_newtype_struct<T: ?Sized + Serialize>(
        self,
        _: &'static str,
        _: &T,
    ) -> Result<GoNumber, NotANumber> {
        Err(NotANumber)
    }
    fn serialize_newtype_variant<T: ?Sized + Serialize>(
        self,
        _: &'static str,
        _: u32,
        _: &'static str,
        _: &T,
    ) -> Result<GoNumber, NotANumber> {
        Err(NotANumber)
    }
    fn serialize_seq(self, _: Option<usize>) -> No {
        Err(NotANumber)
    }
    fn serialize_tuple(self, _: usize) -> No {
        Err(NotANumber)
    }
    fn serialize_tuple_struct(self, _: &'static str, _: usize) -> No {
        Err(NotANumber)
    }
    fn serialize_tuple_variant(self, _: &'static str, _: u32, _: &'static str, _: usize) -> No {
        Err(NotANumber)
    }
    fn serialize_map(self, _: Option<usize>) -> No {
        Err(NotANumber)
    }
    fn serialize_struct(self, _: &'static str, _: usize) -> No {
        Err(NotANumber)
    }
    fn serialize_struct_variant(self, _: &'static str, _: u32, _: &'static str, _: usize) -> No {
        Err(NotANumber)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_go_number_type_is_told_apart() {
        assert_eq!(number_type(&Value::from(3)), Some(GoNumber::Int));
        assert_eq!(number_type(&Value::from(3usize)), Some(GoNumber::Int));
        assert_eq!(number_type(&go_int64(3)), Some(GoNumber::Int64));
        assert_eq!(number_type(&go_uint64(3)), Some(GoNumber::Uint64));
        assert_eq!(number_type(&Value::from(3.0)), Some(GoNumber::Float64));
        assert_eq!(number_type(&Value::from("3")), None);
        // An int64 is a number like any other for the engine.
        assert_eq!(go_int64(-7).as_i64(), Some(-7));
        assert_eq!(go_int64(7).to_string(), "7");
    }
}
