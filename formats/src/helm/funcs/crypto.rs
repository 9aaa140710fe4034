//! Hashes and (to come) Sprig's crypto functions: `sha1sum`, `sha256sum`, `sha512sum`,
//! `adler32sum`.

use super::*;

pub(super) const FUNCS: &[(&str, F)] = &[
    ("sha512sum", |a| {
        use sha2::Digest as _;
        Ok(Value::from(
            sha2::Sha512::digest(s(&a[0]).as_bytes())
                .iter()
                .map(|b| format!("{b:02x}"))
                .collect::<String>(),
        ))
    }),
    ("sha256sum", |a| {
        Ok(Value::from(sha(s(&arg(&a, 0)).as_bytes(), 2)))
    }),
    ("sha1sum", |a| {
        Ok(Value::from(sha(s(&arg(&a, 0)).as_bytes(), 1)))
    }),
    ("adler32sum", |a| {
        let (mut x, mut y) = (1u32, 0u32);
        for b in s(&arg(&a, 0)).bytes() {
            x = (x + u32::from(b)) % 65_521;
            y = (y + x) % 65_521;
        }
        Ok(Value::from(((y << 16) | x).to_string()))
    }),
];

pub(super) fn sha(data: &[u8], which: u8) -> String {
    use sha2::Digest as _;
    let bytes: Vec<u8> = if which == 1 {
        sha1(data).to_vec()
    } else {
        sha2::Sha256::digest(data).to_vec()
    };
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

/// SHA-1 (needed by Sprig's sha1sum; small enough not to warrant a dependency).
pub(super) fn sha1(data: &[u8]) -> [u8; 20] {
    let mut h: [u32; 5] = [0x67452301, 0xEFCDAB89, 0x98BADCFE, 0x10325476, 0xC3D2E1F0];
    let mut msg = data.to_vec();
    let bits = (data.len() as u64).wrapping_mul(8);
    msg.push(0x80);
    while msg.len() % 64 != 56 {
        msg.push(0);
    }
    msg.extend_from_slice(&bits.to_be_bytes());
    for chunk in msg.chunks(64) {
        let mut w = [0u32; 80];
        for i in 0..16 {
            w[i] = u32::from_be_bytes([
                chunk[4 * i],
                chunk[4 * i + 1],
                chunk[4 * i + 2],
                chunk[4 * i + 3],
            ]);
        }
        for i in 16..80 {
            w[i] = (w[i - 3] ^ w[i - 8] ^ w[i - 14] ^ w[i - 16]).rotate_left(1);
        }
        let [mut a, mut b, mut c, mut d, mut e] = h;
        for (i, wi) in w.iter().enumerate() {
            let (f, k) = match i {
                0..=19 => ((b & c) | (!b & d), 0x5A827999),
                20..=39 => (b ^ c ^ d, 0x6ED9EBA1),
                40..=59 => ((b & c) | (b & d) | (c & d), 0x8F1BBCDC),
                _ => (b ^ c ^ d, 0xCA62C1D6),
            };
            let t = a
                .rotate_left(5)
                .wrapping_add(f)
                .wrapping_add(e)
                .wrapping_add(k)
                .wrapping_add(*wi);
            e = d;
            d = c;
            c = b.rotate_left(30);
            b = a;
            a = t;
        }
        for (x, y) in h.iter_mut().zip([a, b, c, d, e]) {
            *x = x.wrapping_add(y);
        }
    }
    let mut out = [0u8; 20];
    for (i, x) in h.iter().enumerate() {
        out[4 * i..4 * i + 4].copy_from_slice(&x.to_be_bytes());
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sha1_known_answer() {
        assert_eq!(sha(b"abc", 1), "a9993e364706816aba3e25717850c26c9cd0d89d");
    }
}
