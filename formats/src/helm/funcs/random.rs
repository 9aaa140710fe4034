//! The seeded per-render random source and Sprig's `rand*`/`uuidv4`.

use super::*;

/// The per-render random source behind `randAlphaNum`, `uuidv4`, ...: SplitMix64 seeded from
/// [`crate::helm::RenderOptions::seed`], so one render's random output is a function of the
/// seed and the chart alone (the rendered digest must not change on every reconcile). Calls
/// happen in the fixed render order, so the same seed gives the same strings.
#[derive(Debug)]
pub struct Rng(Mutex<u64>);

impl Rng {
    /// A random source for one render.
    pub fn value(seed: u64) -> Value {
        Value::from_object(Rng(Mutex::new(seed)))
    }
    pub(super) fn next(&self) -> u64 {
        let mut s = self.0.lock().unwrap_or_else(|p| p.into_inner());
        *s = s.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = *s;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }
    /// A uniform value in `0..n` (n > 0), without modulo bias.
    pub(super) fn below(&self, n: u64) -> u64 {
        let zone = u64::MAX - (u64::MAX % n);
        loop {
            let x = self.next();
            if x < zone {
                return x % n;
            }
        }
    }
}

impl Object for Rng {
    fn repr(self: &Arc<Self>) -> ObjectRepr {
        ObjectRepr::Plain
    }
}

pub(super) fn rng(state: &State) -> Result<Arc<Rng>, Error> {
    state
        .lookup("__rng")
        .and_then(|v| v.downcast_object::<Rng>())
        .ok_or_else(|| err("internal: no random source in this render"))
}

pub(super) fn random_string(
    state: &State,
    name: &str,
    args: &[Value],
    alphabet: &[u8],
) -> Result<Value, Error> {
    check_args(name, args)?;
    let r = rng(state)?;
    let n = args[0].as_i64().unwrap_or(0).max(0);
    Ok(Value::from(
        (0..n)
            .map(|_| alphabet[r.below(alphabet.len() as u64) as usize] as char)
            .collect::<String>(),
    ))
}

pub(super) fn f_uuidv4(state: &State, args: Rest<Value>) -> Result<Value, Error> {
    check_args("uuidv4", &args)?;
    let r = rng(state)?;
    let mut b = [0u8; 16];
    for chunk in b.chunks_mut(8) {
        chunk.copy_from_slice(&r.next().to_le_bytes());
    }
    b[6] = (b[6] & 0x0f) | 0x40;
    b[8] = (b[8] & 0x3f) | 0x80;
    let h: String = b.iter().map(|x| format!("{x:02x}")).collect();
    Ok(Value::from(format!(
        "{}-{}-{}-{}-{}",
        &h[0..8],
        &h[8..12],
        &h[12..16],
        &h[16..20],
        &h[20..32]
    )))
}

pub(super) fn f_rand_int(state: &State, args: Rest<Value>) -> Result<Value, Error> {
    check_args("randInt", &args)?;
    // Sprig: rand.Intn(max-min) + min, which panics (an error) unless max > min.
    let (min, max) = (args[0].as_i64().unwrap_or(0), args[1].as_i64().unwrap_or(0));
    let span = max
        .checked_sub(min)
        .filter(|s| *s > 0)
        .ok_or_else(|| err("randInt: invalid argument to Intn (max must be greater than min)"))?;
    Ok(Value::from(min + rng(state)?.below(span as u64) as i64))
}

pub(super) const ALNUM: &[u8] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789";
