//! Sprig's arithmetic: int and float64 math, and the float functions (`addf`, ...) computed as
//! shopspring/decimal does.

use super::*;

pub(super) const FUNCS: &[(&str, F)] = &[
    // Sprig's integer arithmetic is int64 arithmetic, wrapping as Go's does.
    ("add", |a| {
        Ok(go_int64(
            a.0.iter().map(to_i64).fold(0i64, i64::wrapping_add),
        ))
    }),
    ("add1", |a| {
        Ok(go_int64(to_i64(&arg(&a, 0)).wrapping_add(1)))
    }),
    ("sub", |a| {
        Ok(go_int64(
            to_i64(&arg(&a, 0)).wrapping_sub(to_i64(&arg(&a, 1))),
        ))
    }),
    ("mul", |a| {
        Ok(go_int64(
            a.0.iter().map(to_i64).fold(1i64, i64::wrapping_mul),
        ))
    }),
    ("div", |a| {
        let d = to_i64(&arg(&a, 1));
        if d == 0 {
            return Err(err("runtime error: integer divide by zero"));
        }
        Ok(go_int64(to_i64(&arg(&a, 0)).wrapping_div(d)))
    }),
    ("mod", |a| {
        let d = to_i64(&arg(&a, 1));
        if d == 0 {
            return Err(err("runtime error: integer divide by zero"));
        }
        Ok(go_int64(to_i64(&arg(&a, 0)).wrapping_rem(d)))
    }),
    ("max", |a| {
        Ok(go_int64(a.0.iter().map(to_i64).max().unwrap_or(0)))
    }),
    ("min", |a| {
        Ok(go_int64(a.0.iter().map(to_i64).min().unwrap_or(0)))
    }),
    ("addf", |a| {
        Ok(Value::from(decimal_op(0.0, &a.0, DecOp::Add)))
    }),
    ("add1f", |a| {
        Ok(Value::from(decimal_op(
            to_f64(&arg(&a, 0)),
            &[Value::from(1)],
            DecOp::Add,
        )))
    }),
    ("subf", |a| {
        Ok(Value::from(decimal_op(
            to_f64(&a[0]),
            &a.0[1..],
            DecOp::Sub,
        )))
    }),
    ("mulf", |a| {
        Ok(Value::from(decimal_op(
            to_f64(&a[0]),
            &a.0[1..],
            DecOp::Mul,
        )))
    }),
    ("divf", |a| {
        if a.0[1..].iter().any(|v| to_f64(v) == 0.0) {
            return Err(err("decimal division by 0"));
        }
        Ok(Value::from(decimal_op(
            to_f64(&a[0]),
            &a.0[1..],
            DecOp::Div,
        )))
    }),
    ("maxf", |a| {
        Ok(Value::from(
            a.0[1..].iter().map(to_f64).fold(to_f64(&a[0]), go_max),
        ))
    }),
    ("minf", |a| {
        Ok(Value::from(
            a.0[1..].iter().map(to_f64).fold(to_f64(&a[0]), go_min),
        ))
    }),
    ("toDecimal", |a| {
        Ok(go_int64(
            i64::from_str_radix(&strval(&a[0]), 8).unwrap_or(0),
        ))
    }),
    ("int", |a| Ok(Value::from(to_i64(&arg(&a, 0))))),
    ("int64", |a| Ok(go_int64(to_i64(&arg(&a, 0))))),
    ("float64", |a| Ok(Value::from(to_f64(&arg(&a, 0))))),
    ("atoi", |a| {
        // strconv.Atoi: base 10, an optional sign, nothing else; failures give 0.
        Ok(Value::from(s(&arg(&a, 0)).parse::<i64>().unwrap_or(0)))
    }),
    ("ceil", |a| Ok(Value::from(to_f64(&arg(&a, 0)).ceil()))),
    ("floor", |a| Ok(Value::from(to_f64(&arg(&a, 0)).floor()))),
    ("round", |a| {
        // Sprig: round(value, places[, roundOn=.5]) as float64.
        let (x, places) = (to_f64(&arg(&a, 0)), to_i64(&arg(&a, 1)).clamp(0, 15) as i32);
        let round_on = if a.len() > 2 { to_f64(&a[2]) } else { 0.5 };
        let pow = 10f64.powi(places);
        let digit = x.abs() * pow;
        let (int, frac) = (digit.trunc(), digit.fract());
        let r = if frac >= round_on { int + 1.0 } else { int };
        Ok(Value::from(r / pow * x.signum()))
    }),
];

/// Sprig's float arithmetic (addf, subf, mulf, divf): shopspring/decimal on each operand's
/// shortest decimal form, so `addf 0.1 0.2` is 0.3 as in helm, not 0.30000000000000004.
#[derive(Clone, Copy)]
pub(super) enum DecOp {
    Add,
    Sub,
    Mul,
    Div,
}

/// A decimal `mantissa × 10^-scale`.
#[derive(Clone, Copy)]
pub(super) struct Dec {
    m: i128,
    scale: u32,
}

impl Dec {
    /// The shortest decimal that reads back as `f` (decimal.NewFromFloat).
    fn from_f64(f: f64) -> Option<Dec> {
        if !f.is_finite() {
            return None;
        }
        let e = format!("{f:e}");
        let (mant, exp) = e.split_once('e')?;
        let exp: i32 = exp.parse().ok()?;
        let neg = mant.starts_with('-');
        let digits: String = mant.chars().filter(char::is_ascii_digit).collect();
        let frac_len = digits.len() as i32 - 1;
        let mut m: i128 = digits.parse().ok()?;
        let mut scale = frac_len - exp;
        if scale < 0 {
            m = m.checked_mul(10i128.checked_pow(scale.unsigned_abs())?)?;
            scale = 0;
        }
        Some(Dec {
            m: if neg { -m } else { m },
            scale: u32::try_from(scale).ok()?,
        })
    }
    fn rescale(self, scale: u32) -> Option<i128> {
        self.m
            .checked_mul(10i128.checked_pow(scale.checked_sub(self.scale)?)?)
    }
    fn to_f64(self) -> f64 {
        let neg = self.m < 0;
        let digits = self.m.unsigned_abs().to_string();
        let scale = self.scale as usize;
        let text = if scale == 0 {
            digits
        } else if digits.len() > scale {
            format!(
                "{}.{}",
                &digits[..digits.len() - scale],
                &digits[digits.len() - scale..]
            )
        } else {
            format!("0.{}{digits}", "0".repeat(scale - digits.len()))
        };
        let f: f64 = text.parse().unwrap_or(0.0);
        if neg {
            -f
        } else {
            f
        }
    }
    fn apply(self, op: DecOp, o: Dec) -> Option<Dec> {
        match op {
            DecOp::Add | DecOp::Sub => {
                let scale = self.scale.max(o.scale);
                let (a, b) = (self.rescale(scale)?, o.rescale(scale)?);
                let m = match op {
                    DecOp::Add => a.checked_add(b)?,
                    _ => a.checked_sub(b)?,
                };
                Some(Dec { m, scale })
            }
            DecOp::Mul => Some(Dec {
                m: self.m.checked_mul(o.m)?,
                scale: self.scale.checked_add(o.scale)?,
            }),
            DecOp::Div => {
                // decimal.Div: 16 digits after the point, rounded half away from zero.
                if o.m == 0 {
                    return None;
                }
                const PREC: u32 = 16;
                let shift = (PREC + o.scale).checked_sub(self.scale);
                let (num, den) = match shift {
                    Some(s) => (self.m.checked_mul(10i128.checked_pow(s)?)?, o.m),
                    None => (
                        self.m,
                        o.m.checked_mul(10i128.checked_pow(self.scale - PREC - o.scale)?)?,
                    ),
                };
                let (q, r) = (num / den, num % den);
                let q = if r.unsigned_abs() * 2 >= den.unsigned_abs() {
                    if (num < 0) != (den < 0) {
                        q - 1
                    } else {
                        q + 1
                    }
                } else {
                    q
                };
                Some(Dec { m: q, scale: PREC })
            }
        }
    }
}

pub(super) fn decimal_op(first: f64, rest: &[Value], op: DecOp) -> f64 {
    let float = |a: f64, b: f64| match op {
        DecOp::Add => a + b,
        DecOp::Sub => a - b,
        DecOp::Mul => a * b,
        DecOp::Div => a / b,
    };
    let mut acc = Dec::from_f64(first);
    let mut plain = first;
    for v in rest {
        let x = to_f64(v);
        plain = float(plain, x);
        acc = acc.and_then(|d| d.apply(op, Dec::from_f64(x)?));
    }
    // Outside i128's range the float result is the best available.
    acc.map_or(plain, Dec::to_f64)
}

/// Go's `math.Max`/`math.Min` (NaN wins).
pub(super) fn go_max(a: f64, b: f64) -> f64 {
    if a.is_nan() || b.is_nan() {
        f64::NAN
    } else {
        a.max(b)
    }
}

pub(super) fn go_min(a: f64, b: f64) -> f64 {
    if a.is_nan() || b.is_nan() {
        f64::NAN
    } else {
        a.min(b)
    }
}
