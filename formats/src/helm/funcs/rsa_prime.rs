//! RSA key generation for Sprig's `genCA`, `genSelfSignedCert`, `genSignedCert` and
//! `genPrivateKey "rsa"`, fast and a function of the render's seed.
//!
//! The keys are the very keys the `rsa` crate's `RsaPrivateKey::new` makes from the same ChaCha20
//! stream (so a render's output does not change with this code): the same candidates are drawn
//! in the same order, moved to the same first number not divisible by a prime up to 53, and the
//! same exponent is computed. Only the primality test differs, and its answer does not: a
//! candidate is tried against more small primes, then by Miller-Rabin rounds (base 2 first) in
//! a Montgomery arithmetic on fixed-size limbs, where the crate's test runs 21 rounds and a
//! Lucas test in general-purpose big integers. Deciding whether a number is prime has one right
//! answer; for the random candidates drawn here, a composite passing the base-2 round is rarer
//! than 2^-80, and four more rounds follow.

use rand_chacha::ChaCha20Rng;
use rand_core::RngCore as _;
use rsa::BigUint;

/// The public exponent of every key (as Go's `rsa.GenerateKey` and the `rsa` crate use).
const EXPONENT: u32 = 65537;

/// The product of the odd primes 3..=53: candidates are moved past multiples of these, as the
/// `rsa` crate's prime search does.
const SMALL_PRIMES_PRODUCT: u64 = 16_294_579_238_595_022_365;
/// The odd primes in [`SMALL_PRIMES_PRODUCT`].
const SMALL_PRIMES: [u64; 15] = [3, 5, 7, 11, 13, 17, 19, 23, 29, 31, 37, 41, 43, 47, 53];
/// Candidates are also tried against the primes from 59 up to this bound before any modular
/// exponentiation: dividing by a small prime costs far less than a Miller-Rabin round.
const TRIAL_BOUND: u64 = 4096;
/// Bases of the Miller-Rabin rounds after base 2.
const MORE_BASES: [u64; 4] = [3, 5, 7, 11];

/// An RSA key of `bits` bits with exponent 65537, drawn from `rng` exactly as
/// `rsa::RsaPrivateKey::new(rng, bits)` draws it.
pub(super) fn generate(rng: &mut ChaCha20Rng, bits: usize) -> Result<rsa::RsaPrivateKey, String> {
    if bits < 64 {
        // The crate's own path for toy sizes (no chart asks for them; kept exact).
        return rsa::RsaPrivateKey::new(rng, bits).map_err(|e| e.to_string());
    }
    let exponent = BigUint::from(EXPONENT);
    let trial = TrialDivisors::get();
    loop {
        let p = random_prime(rng, bits / 2, trial);
        let q = random_prime(rng, bits - p.bits(), trial);
        if p == q {
            continue;
        }
        let n = &p * &q;
        if n.bits() != bits {
            continue;
        }
        // 65537 is prime: it is invertible modulo (p-1)(q-1) unless it divides p-1 or q-1.
        let one = BigUint::from(1u32);
        if [&p, &q]
            .iter()
            .any(|prime| (*prime - &one) % EXPONENT == BigUint::from(0u32))
        {
            continue;
        }
        return rsa::RsaPrivateKey::from_primes(vec![p, q], exponent).map_err(|e| e.to_string());
    }
}

/// A prime of `bits` bits with its top two bits set, drawn as the `rsa` crate's `gen_prime`
/// draws it: random bytes, the top bits set, odd, then moved up by the least even step that
/// leaves it divisible by no prime up to 53; drawn again if that made it too long or it is not
/// prime.
///
/// Testing a candidate costs far more than drawing it, so candidates are drawn ahead from a copy
/// of the stream, a batch at a time, and tested on several threads; the first prime in draw
/// order is the answer, and `rng` is then moved past exactly the draws the sequential search
/// would have made. The result does not depend on the number of threads.
fn random_prime(rng: &mut ChaCha20Rng, bits: usize, trial: &TrialDivisors) -> BigUint {
    let threads = std::thread::available_parallelism()
        .map_or(1, |n| n.get())
        .clamp(1, 4);
    let batch = 4 * threads;
    let mut bytes = vec![0u8; bits.div_ceil(8)];
    loop {
        let mut ahead = rng.clone();
        let candidates: Vec<Vec<u64>> = (0..batch)
            .map(|_| candidate(&mut ahead, bits, &mut bytes))
            .collect();
        let found = first_prime(&candidates, bits, trial, threads);
        // The sequential search's draws: up to the prime, or the whole batch.
        let drawn = found.map_or(batch, |index| index + 1);
        for _ in 0..drawn {
            rng.fill_bytes(&mut bytes);
        }
        if let Some(index) = found {
            return BigUint::from_bytes_le(&limbs_to_le_bytes(&candidates[index]));
        }
    }
}

/// The next candidate of [`random_prime`] (one draw of `bytes.len()` bytes from `rng`).
fn candidate(rng: &mut ChaCha20Rng, bits: usize, bytes: &mut [u8]) -> Vec<u64> {
    let top_bits = match bits % 8 {
        0 => 8,
        b => b,
    };
    rng.fill_bytes(bytes);
    bytes[0] &= ((1u32 << top_bits) - 1) as u8;
    if top_bits >= 2 {
        bytes[0] |= 3u8 << (top_bits - 2);
    } else {
        bytes[0] |= 1;
        if bytes.len() > 1 {
            bytes[1] |= 0x80;
        }
    }
    if let Some(last) = bytes.last_mut() {
        *last |= 1;
    }
    let mut limbs = limbs_from_be(bytes);
    let remainder = rem_u64(&limbs, SMALL_PRIMES_PRODUCT);
    // No such step below 2^20 (it never happens) leaves the candidate as drawn, as there.
    let delta = (0..1u64 << 20)
        .step_by(2)
        .find(|delta| {
            let m = remainder + delta;
            !SMALL_PRIMES
                .iter()
                .any(|prime| m.is_multiple_of(*prime) && (bits > 6 || m != *prime))
        })
        .unwrap_or(0);
    add_small(&mut limbs, delta);
    limbs
}

/// The index of the first of `candidates` that has `bits` bits and is prime, tested on up to
/// `threads` threads; a thread stops at candidates past a prime already found.
fn first_prime(
    candidates: &[Vec<u64>],
    bits: usize,
    trial: &TrialDivisors,
    threads: usize,
) -> Option<usize> {
    use std::sync::atomic::{AtomicUsize, Ordering};
    let test = |index: usize| {
        bit_length(&candidates[index]) == bits && is_prime(&candidates[index], trial)
    };
    if threads < 2 {
        return (0..candidates.len()).find(|index| test(*index));
    }
    let first = AtomicUsize::new(usize::MAX);
    std::thread::scope(|scope| {
        for start in 0..threads {
            let (first, test) = (&first, &test);
            scope.spawn(move || {
                for index in (start..candidates.len()).step_by(threads) {
                    if index > first.load(Ordering::Relaxed) {
                        return;
                    }
                    if test(index) {
                        first.fetch_min(index, Ordering::Relaxed);
                        return;
                    }
                }
            });
        }
    });
    Some(first.into_inner()).filter(|index| *index != usize::MAX)
}

/// True when the odd number `n` (little-endian limbs, over 2^64) is prime: no divisor up to
/// [`TRIAL_BOUND`], then Miller-Rabin with base 2 and [`MORE_BASES`]. The arithmetic runs on
/// fixed-size limb arrays (the number padded with zero limbs), so that the compiler knows every
/// loop's length.
fn is_prime(n: &[u64], trial: &TrialDivisors) -> bool {
    if trial.divides(n) {
        return false;
    }
    match n.len() {
        0..=8 => miller_rabin::<8>(n),
        9..=16 => miller_rabin::<16>(n),
        17..=32 => miller_rabin::<32>(n),
        33..=64 => miller_rabin::<64>(n),
        _ => miller_rabin_big(&BigUint::from_bytes_le(&limbs_to_le_bytes(n))),
    }
}

/// The Miller-Rabin rounds of [`is_prime`] in general-purpose big integers, for numbers over 64
/// limbs (primes of keys over 8192 bits).
fn miller_rabin_big(n: &BigUint) -> bool {
    let one = BigUint::from(1u32);
    let n_minus_1 = n - &one;
    let s = n_minus_1.trailing_zeros().unwrap_or(0);
    let d = &n_minus_1 >> s;
    std::iter::once(2).chain(MORE_BASES).all(|base| {
        let mut x = BigUint::from(base).modpow(&d, n);
        if x == one || x == n_minus_1 {
            return true;
        }
        for _ in 1..s {
            x = x.modpow(&BigUint::from(2u32), n);
            if x == n_minus_1 {
                return true;
            }
            if x == one {
                return false;
            }
        }
        false
    })
}

/// The Miller-Rabin rounds of [`is_prime`] in `N` limbs.
fn miller_rabin<const N: usize>(n: &[u64]) -> bool {
    let mut m = [0u64; N];
    m[..n.len()].copy_from_slice(n);
    let monty = Montgomery::new(m);
    std::iter::once(2)
        .chain(MORE_BASES)
        .all(|base| monty.miller_rabin_round(base))
}

/// The primes from 59 to [`TRIAL_BOUND`], grouped so that each group's product fits 32 bits,
/// with each group's `2^(64 i) mod product`: a number's remainder by a group is then a sum of
/// products, reduced once.
struct TrialDivisors {
    groups: Vec<TrialGroup>,
}

struct TrialGroup {
    product: u64,
    primes: Vec<u64>,
    /// `2^(64 i) mod product` for limb `i`.
    limb_weights: Vec<u64>,
}

/// Limbs of the largest candidate the weights are computed for (a 4096-bit prime, half of an
/// 8192-bit key); longer numbers are reduced limb by limb instead.
const WEIGHTED_LIMBS: usize = 64;

impl TrialDivisors {
    fn get() -> &'static TrialDivisors {
        static DIVISORS: std::sync::OnceLock<TrialDivisors> = std::sync::OnceLock::new();
        DIVISORS.get_or_init(TrialDivisors::new)
    }

    fn new() -> TrialDivisors {
        let primes: Vec<u64> = (59..=TRIAL_BOUND)
            .step_by(2)
            .filter(|c| {
                (3..)
                    .step_by(2)
                    .take_while(|d| d * d <= *c)
                    .all(|d| c % d != 0)
            })
            .collect();
        let mut groups: Vec<TrialGroup> = Vec::new();
        let mut current: Vec<u64> = Vec::new();
        let mut product = 1u64;
        for prime in primes {
            if product * prime > u64::from(u32::MAX) {
                groups.push(TrialGroup::new(std::mem::take(&mut current), product));
                product = 1;
            }
            product *= prime;
            current.push(prime);
        }
        if !current.is_empty() {
            groups.push(TrialGroup::new(current, product));
        }
        TrialDivisors { groups }
    }

    /// True when a prime of the table divides `n`.
    fn divides(&self, n: &[u64]) -> bool {
        self.groups.iter().any(|group| {
            let remainder = group.remainder(n);
            group
                .primes
                .iter()
                .any(|prime| remainder.is_multiple_of(*prime))
        })
    }
}

impl TrialGroup {
    fn new(primes: Vec<u64>, product: u64) -> TrialGroup {
        let base = (1u128 << 64) % u128::from(product);
        let mut weight = 1u128;
        let limb_weights = (0..WEIGHTED_LIMBS)
            .map(|_| {
                let this = weight as u64;
                weight = weight * base % u128::from(product);
                this
            })
            .collect();
        TrialGroup {
            product,
            primes,
            limb_weights,
        }
    }

    fn remainder(&self, n: &[u64]) -> u64 {
        if n.len() > self.limb_weights.len() {
            return rem_u64(n, self.product);
        }
        // Each term is under 2^96 and there are at most 64: the sum fits 128 bits.
        let sum: u128 = n
            .iter()
            .zip(&self.limb_weights)
            .map(|(limb, weight)| u128::from(*limb) * u128::from(*weight))
            .sum();
        (sum % u128::from(self.product)) as u64
    }
}

/// Arithmetic modulo an odd `m` of `N` limbs in Montgomery form (`x R mod m`, `R = 2^(64 N)`).
struct Montgomery<const N: usize> {
    m: [u64; N],
    /// `-m^-1 mod 2^64`.
    m_inv: u64,
    /// `R mod m`: one in Montgomery form.
    one: [u64; N],
    /// `m - (R mod m)`: minus one in Montgomery form.
    minus_one: [u64; N],
}

/// Room for a double-length product and its carry, for `N` up to 64 limbs.
const SCRATCH: usize = 2 * 64 + 1;

impl<const N: usize> Montgomery<N> {
    fn new(m: [u64; N]) -> Montgomery<N> {
        // Newton's iteration for m^-1 mod 2^64 (m odd): each step doubles the correct bits.
        let mut inv = 1u64;
        for _ in 0..6 {
            inv = inv.wrapping_mul(2u64.wrapping_sub(m[0].wrapping_mul(inv)));
        }
        let modulus = BigUint::from_bytes_le(&limbs_to_le_bytes(&m));
        let r = (BigUint::from(1u32) << (64 * N)) % &modulus;
        let mut one = [0u64; N];
        one.copy_from_slice(&limbs_of(&r, N));
        let mut minus_one = m;
        sub_in_place(&mut minus_one, &one);
        Montgomery {
            m,
            m_inv: inv.wrapping_neg(),
            one,
            minus_one,
        }
    }

    /// One Miller-Rabin round with a small `base`: true when `m` is a strong probable prime to it.
    fn miller_rabin_round(&self, base: u64) -> bool {
        let mut m_minus_1 = self.m;
        m_minus_1[0] -= 1;
        let s = trailing_zeros(&m_minus_1);
        let d = shift_right(&m_minus_1, s);
        let mut x = self.pow_small(base, &d);
        if x == self.one || x == self.minus_one {
            return true;
        }
        for _ in 1..s {
            x = self.square(&x);
            if x == self.minus_one {
                return true;
            }
            if x == self.one {
                return false;
            }
        }
        false
    }

    /// `base^exponent` in Montgomery form, left to right: a squaring per bit and a
    /// multiplication by the small base (additions of the number to itself) per set bit.
    fn pow_small(&self, base: u64, exponent: &[u64]) -> [u64; N] {
        let mut x = self.one;
        for bit in (0..bit_length(exponent)).rev() {
            x = self.square(&x);
            if exponent[bit / 64] >> (bit % 64) & 1 == 1 {
                x = self.times_small(&x, base);
            }
        }
        x
    }

    /// `x * k mod m` for a small `k` (Montgomery form is kept: `xR k = (xk) R`).
    fn times_small(&self, x: &[u64; N], k: u64) -> [u64; N] {
        if k == 0 {
            return [0u64; N];
        }
        // Double and add from the top bit, which starts the sum at `x` (base 2: one addition).
        let mut acc = *x;
        for bit in (0..63 - k.leading_zeros()).rev() {
            acc = self.add(&acc, &acc);
            if k >> bit & 1 == 1 {
                acc = self.add(&acc, x);
            }
        }
        acc
    }

    /// `a + b mod m` for `a, b < m`.
    fn add(&self, a: &[u64; N], b: &[u64; N]) -> [u64; N] {
        let mut out = *a;
        let carry = add_in_place(&mut out, b);
        if carry || !less_than(&out, &self.m) {
            sub_in_place(&mut out, &self.m);
        }
        out
    }

    /// `x^2 / R mod m`: the square (each cross product once, doubled), then Montgomery
    /// reduction.
    fn square(&self, x: &[u64; N]) -> [u64; N] {
        let mut t = [0u64; SCRATCH];
        for i in 0..N {
            let mut carry = 0u128;
            for j in i + 1..N {
                let v = u128::from(t[i + j]) + u128::from(x[i]) * u128::from(x[j]) + carry;
                t[i + j] = v as u64;
                carry = v >> 64;
            }
            t[i + N] = carry as u64;
        }
        let mut carry = 0u64;
        for limb in t.iter_mut().take(2 * N) {
            let next = *limb >> 63;
            *limb = *limb << 1 | carry;
            carry = next;
        }
        let mut carry = 0u128;
        for i in 0..N {
            let square = u128::from(x[i]) * u128::from(x[i]);
            let low = u128::from(t[2 * i]) + (square & u128::from(u64::MAX)) + carry;
            t[2 * i] = low as u64;
            let high = u128::from(t[2 * i + 1]) + (square >> 64) + (low >> 64);
            t[2 * i + 1] = high as u64;
            carry = high >> 64;
        }
        self.reduce(&mut t)
    }

    /// Montgomery reduction of `t < m R` (2N limbs used): `t / R mod m`. Each row's carry out
    /// of limb `i + N` is held in one word and added with the next row, rather than rippled
    /// up at once: no data-dependent loop, a quarter less time per squaring.
    fn reduce(&self, t: &mut [u64; SCRATCH]) -> [u64; N] {
        let mut overflow = 0u64;
        for i in 0..N {
            let u = t[i].wrapping_mul(self.m_inv);
            let mut carry = 0u64;
            for j in 0..N {
                let v = u128::from(t[i + j])
                    + u128::from(u) * u128::from(self.m[j])
                    + u128::from(carry);
                t[i + j] = v as u64;
                carry = (v >> 64) as u64;
            }
            let v = u128::from(t[i + N]) + u128::from(carry) + u128::from(overflow);
            t[i + N] = v as u64;
            overflow = (v >> 64) as u64;
        }
        t[2 * N] = overflow;
        let mut out = [0u64; N];
        out.copy_from_slice(&t[N..2 * N]);
        if t[2 * N] != 0 || !less_than(&out, &self.m) {
            sub_in_place(&mut out, &self.m);
        }
        out
    }
}

/// Little-endian 64-bit limbs of a big-endian byte string.
fn limbs_from_be(bytes: &[u8]) -> Vec<u64> {
    let mut limbs = vec![0u64; bytes.len().div_ceil(8)];
    for (i, byte) in bytes.iter().rev().enumerate() {
        limbs[i / 8] |= u64::from(*byte) << (8 * (i % 8));
    }
    limbs
}

fn limbs_to_le_bytes(limbs: &[u64]) -> Vec<u8> {
    limbs.iter().flat_map(|limb| limb.to_le_bytes()).collect()
}

/// `value` as `len` little-endian limbs (`value` fits them).
fn limbs_of(value: &BigUint, len: usize) -> Vec<u64> {
    let mut bytes = value.to_bytes_le();
    bytes.resize(len * 8, 0);
    bytes
        .chunks_exact(8)
        .map(|chunk| {
            let mut limb = [0u8; 8];
            limb.copy_from_slice(chunk);
            u64::from_le_bytes(limb)
        })
        .collect()
}

fn rem_u64(limbs: &[u64], divisor: u64) -> u64 {
    limbs.iter().rev().fold(0u64, |remainder, limb| {
        ((u128::from(remainder) << 64 | u128::from(*limb)) % u128::from(divisor)) as u64
    })
}

/// Adds a small number; a carry out of the top limb grows the number by a limb.
fn add_small(limbs: &mut Vec<u64>, value: u64) {
    let mut carry = value;
    for limb in limbs.iter_mut() {
        let (sum, overflow) = limb.overflowing_add(carry);
        *limb = sum;
        carry = u64::from(overflow);
        if carry == 0 {
            return;
        }
    }
    if carry != 0 {
        limbs.push(carry);
    }
}

fn bit_length(limbs: &[u64]) -> usize {
    limbs
        .iter()
        .rposition(|limb| *limb != 0)
        .map_or(0, |top| 64 * top + 64 - limbs[top].leading_zeros() as usize)
}

fn trailing_zeros(limbs: &[u64]) -> usize {
    limbs
        .iter()
        .position(|limb| *limb != 0)
        .map_or(0, |i| 64 * i + limbs[i].trailing_zeros() as usize)
}

fn shift_right(limbs: &[u64], shift: usize) -> Vec<u64> {
    let (words, bits) = (shift / 64, shift % 64);
    (0..limbs.len())
        .map(|i| {
            let low = limbs.get(i + words).copied().unwrap_or(0);
            let high = limbs.get(i + words + 1).copied().unwrap_or(0);
            if bits == 0 {
                low
            } else {
                low >> bits | high << (64 - bits)
            }
        })
        .collect()
}

fn less_than(a: &[u64], b: &[u64]) -> bool {
    for (x, y) in a.iter().rev().zip(b.iter().rev()) {
        if x != y {
            return x < y;
        }
    }
    false
}

/// `a += b` (same length); true on a carry out.
fn add_in_place(a: &mut [u64], b: &[u64]) -> bool {
    let mut carry = false;
    for (x, y) in a.iter_mut().zip(b) {
        let (sum, first) = x.overflowing_add(*y);
        let (sum, second) = sum.overflowing_add(u64::from(carry));
        *x = sum;
        carry = first || second;
    }
    carry
}

/// `a -= b` (same length), wrapping.
fn sub_in_place(a: &mut [u64], b: &[u64]) {
    let mut borrow = false;
    for (x, y) in a.iter_mut().zip(b) {
        let (diff, first) = x.overflowing_sub(*y);
        let (diff, second) = diff.overflowing_sub(u64::from(borrow));
        *x = diff;
        borrow = first || second;
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use rand_core::SeedableRng as _;
    use rsa::traits::{PrivateKeyParts as _, PublicKeyParts as _};

    #[test]
    fn keys_are_the_rsa_crates_keys_for_the_same_stream() {
        for seed in 0u8..4 {
            let mut ours = ChaCha20Rng::from_seed([seed; 32]);
            let mut theirs = ChaCha20Rng::from_seed([seed; 32]);
            let key = generate(&mut ours, 2048).unwrap();
            let reference = rsa::RsaPrivateKey::new(&mut theirs, 2048).unwrap();
            assert_eq!(key.n(), reference.n(), "seed {seed}");
            assert_eq!(key.d(), reference.d(), "seed {seed}");
            assert_eq!(key.primes(), reference.primes(), "seed {seed}");
            assert_eq!(
                ours.next_u64(),
                theirs.next_u64(),
                "the stream is left where the crate leaves it"
            );
        }
    }

    #[test]
    fn primality_agrees_with_known_numbers() {
        let trial = TrialDivisors::get();
        // 2^127 - 1 and 2^521 - 1 are prime; their products with a small prime and a product
        // of two large primes are not.
        let m127 = vec![u64::MAX, u64::MAX >> 1];
        assert!(is_prime(&m127, trial));
        let mut m521 = vec![u64::MAX; 8];
        m521.push(0x1ff);
        assert!(is_prime(&m521, trial));
        let composite = limbs_of(
            &(BigUint::from_bytes_le(&limbs_to_le_bytes(&m127))
                * BigUint::from_bytes_le(&limbs_to_le_bytes(&m127))),
            4,
        );
        assert!(!is_prime(&composite, trial));
        // Caught by trial division: 89 divides the strong pseudoprime 2047, 641 divides
        // 2^32 + 1. Past the trial bound, by Miller-Rabin: 4099 * 4111.
        assert!(!is_prime(&[2047], trial));
        assert!(!is_prime(&[4_294_967_297], trial));
        assert!(!is_prime(&[4099 * 4111], trial));
        assert!(
            is_prime(&[4_294_967_311], trial),
            "the least prime past 2^32"
        );
    }
}
