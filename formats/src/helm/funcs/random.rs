//! The seeded per-render random source and Sprig's `rand*`/`uuidv4`.

use super::*;
use rand_chacha::ChaCha20Rng;
use rand_core::{RngCore as _, SeedableRng as _};

/// The per-render random source behind `randAlphaNum`, `uuidv4`, keys and salts: a ChaCha20
/// stream keyed with the 256-bit [`crate::helm::RenderOptions::seed`], so one render's random
/// output is a function of the seed and the chart alone (the rendered digest must not change on
/// every reconcile) and cannot be guessed without the seed. Calls happen in the fixed render
/// order within a template file (each file has its own stream, see [`Rng::derived_seed`]), so the
/// same seed gives the same strings.
pub struct Rng(Mutex<ChaCha20Rng>);

impl std::fmt::Debug for Rng {
    // The stream's state is the seed: never printed.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Rng")
    }
}

impl Rng {
    /// The seed of `template`'s own stream: SHA-256 of the render's seed and the template's name.
    pub fn derived_seed(seed: &[u8; 32], template: &str) -> [u8; 32] {
        use sha2::Digest as _;
        let mut hash = sha2::Sha256::new();
        hash.update(seed);
        hash.update(template.as_bytes());
        hash.finalize().into()
    }

    /// A random source for one render.
    pub fn value(seed: [u8; 32]) -> Value {
        Value::from_object(Rng(Mutex::new(ChaCha20Rng::from_seed(seed))))
    }
    pub(super) fn next(&self) -> u64 {
        let mut stream = self.0.lock().unwrap_or_else(|p| p.into_inner());
        stream.next_u64()
    }
    /// The next 32 bytes of the stream (the key of a derived stream, see `crypto::chacha`).
    pub(super) fn next_seed(&self) -> [u8; 32] {
        let mut seed = [0u8; 32];
        let mut stream = self.0.lock().unwrap_or_else(|p| p.into_inner());
        stream.fill_bytes(&mut seed);
        seed
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
