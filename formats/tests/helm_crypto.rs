//! Sprig's random and crypto functions against the real `helm template`. Their output is
//! random in both, so what must match is its shape: PEM block types, key types and sizes,
//! every certificate field (openssl's text with serials, times, keys and signatures masked),
//! validity in days from the clock, chains that verify, hashes that verify, ciphertexts each
//! side decrypts. And pallet's output must be a function of the render seed.
//!
//! Needs the helm oracle (`tools/helm.sh build`) and the `openssl` command.

mod oracle;

use oracle::helm_bin;
use std::collections::BTreeMap;
use std::io::Write as _;
use std::path::Path;
use std::process::{Command, Stdio};

use base64::Engine as _;
use pallet_formats::helm::{self, RenderOptions};

/// The injected clock for pallet's renders.
const NOW: i64 = 1_750_000_000;

/// Runs openssl with `input` on stdin; its stdout and stderr together.
fn openssl(args: &[&str], input: &str) -> String {
    let mut child = Command::new("openssl")
        .args(args)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("these tests need the openssl command (apt-get install openssl)");
    child
        .stdin
        .take()
        .expect("stdin")
        .write_all(input.as_bytes())
        .expect("write to openssl");
    let out = child.wait_with_output().expect("openssl");
    format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    )
}

/// A chart whose one template is `body` (a ConfigMap whose data values are base64).
fn chart(body: &str) -> tempfile::TempDir {
    let dir = tempfile::tempdir().expect("tempdir");
    let root = dir.path().join("probe");
    std::fs::create_dir_all(root.join("templates")).expect("mkdir");
    std::fs::write(
        root.join("Chart.yaml"),
        "apiVersion: v2\nname: probe\nversion: 0.1.0\n",
    )
    .expect("write");
    std::fs::write(root.join("templates/t.yaml"), body).expect("write");
    dir
}

fn decode(data: &serde_json::Value) -> BTreeMap<String, String> {
    let b64 = base64::engine::general_purpose::STANDARD;
    data.as_object()
        .expect("data")
        .iter()
        .map(|(k, v)| {
            let bytes = b64.decode(v.as_str().expect("string")).expect("base64");
            (k.clone(), String::from_utf8(bytes).expect("utf-8"))
        })
        .collect()
}

fn render_pallet(dir: &Path, seed: u8) -> Result<BTreeMap<String, String>, String> {
    let opts = RenderOptions {
        now: Some(NOW),
        seed: [seed; 32],
        ..RenderOptions::default()
    };
    let objs = helm::render(&dir.join("probe"), &opts).map_err(|e| e.to_string())?;
    Ok(decode(&objs[0]["data"]))
}

fn render_helm(dir: &Path) -> Result<BTreeMap<String, String>, String> {
    let out = Command::new(helm_bin())
        .args(["template", "rel"])
        .arg(dir.join("probe"))
        .env("TZ", "UTC")
        .output()
        .expect("running helm");
    if !out.status.success() {
        return Err(String::from_utf8_lossy(&out.stderr).into_owned());
    }
    let text = String::from_utf8_lossy(&out.stdout);
    let doc = text
        .split("\n---")
        .find(|d| d.contains("kind: ConfigMap"))
        .expect("a ConfigMap");
    let v: serde_json::Value = serde_saphyr::from_str(doc).expect("helm's YAML");
    Ok(decode(&v["data"]))
}

/// openssl's text of a certificate with what is random or time-dependent masked.
fn cert_shape(pem: &str) -> String {
    let text = openssl(&["x509", "-noout", "-text"], pem);
    let mut out = Vec::new();
    let mut skip_hex = false;
    for line in text.lines() {
        let t = line.trim();
        let hex_line = !t.is_empty()
            && t.split(':')
                .all(|p| p.len() <= 2 && p.chars().all(|c| c.is_ascii_hexdigit()));
        if hex_line {
            if !skip_hex {
                out.push("<hex>".to_string());
                skip_hex = true;
            }
            continue;
        }
        skip_hex = false;
        let masked = if t.starts_with("Not Before") || t.starts_with("Not After") {
            t.split(':').next().unwrap_or_default().to_string()
        } else if t.starts_with("Serial Number") {
            "Serial Number".into()
        } else if t.starts_with("Modulus") || t.starts_with("pub:") || t.starts_with("priv:") {
            t.split(':').next().unwrap_or_default().to_string()
        } else {
            t.to_string()
        };
        out.push(masked);
    }
    out.join("\n")
}

/// Seconds since the epoch of an openssl date (`Nov 14 22:13:20 2023 GMT`).
fn openssl_time(s: &str) -> i64 {
    let parts: Vec<&str> = s.split_whitespace().collect();
    let month = [
        "Jan", "Feb", "Mar", "Apr", "May", "Jun", "Jul", "Aug", "Sep", "Oct", "Nov", "Dec",
    ]
    .iter()
    .position(|m| *m == parts[0])
    .expect("month") as i64
        + 1;
    let day: i64 = parts[1].parse().expect("day");
    let hms: Vec<i64> = parts[2]
        .split(':')
        .map(|x| x.parse().expect("time"))
        .collect();
    let year: i64 = parts[3].parse().expect("year");
    // Days from civil (Howard Hinnant's algorithm).
    let y = if month <= 2 { year - 1 } else { year };
    let era = y.div_euclid(400);
    let yoe = y - era * 400;
    let mp = (month + 9) % 12;
    let doy = (153 * mp + 2) / 5 + day - 1;
    let doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
    let days = era * 146_097 + doe - 719_468;
    days * 86_400 + hms[0] * 3600 + hms[1] * 60 + hms[2]
}

/// (notBefore, notAfter) of a certificate.
fn validity(pem: &str) -> (i64, i64) {
    let text = openssl(&["x509", "-noout", "-startdate", "-enddate"], pem);
    let field = |name: &str| {
        text.lines()
            .find_map(|l| l.strip_prefix(name))
            .map(openssl_time)
            .unwrap_or_else(|| panic!("no {name} in {text}"))
    };
    (field("notBefore="), field("notAfter="))
}

/// Whether `cert` verifies against `ca` (validity times not checked).
fn verifies(ca: &str, cert: &str) -> bool {
    let dir = tempfile::tempdir().expect("tempdir");
    let ca_path = dir.path().join("ca.pem");
    std::fs::write(&ca_path, ca).expect("write");
    let out = openssl(
        &[
            "verify",
            "-no_check_time",
            "-partial_chain",
            "-CAfile",
            ca_path.to_str().expect("path"),
        ],
        cert,
    );
    out.contains(": OK")
}

fn key_shape(pem: &str) -> (String, String) {
    let first = pem.lines().next().unwrap_or_default().to_string();
    let text = openssl(&["pkey", "-noout", "-text"], pem);
    (first, text.lines().next().unwrap_or_default().to_string())
}

const CERTS: &str = r#"{{- $ca := genCA "my-ca" 365 }}
{{- $cert := genSignedCert "svc.ns" (list "10.0.0.1" "::1" "::ffff:1.2.3.4") (list "svc" "svc.ns.svc") 30 $ca }}
{{- $self := genSelfSignedCert "" nil (list "only-san") 10 }}
{{- $ec := genPrivateKey "ecdsa" }}
{{- $ed := genPrivateKey "ed25519" }}
{{- $caEc := genCAWithKey "ec-ca" 5 $ec }}
{{- $signedEd := genSignedCertWithKey "ed" nil (list "x") 7 $caEc $ed }}
{{- $selfEd := genSelfSignedCertWithKey "*.wild.example" (list "127.0.0.1") nil 3 $ed }}
{{- $custom := buildCustomCert ($ca.Cert | b64enc) ($ca.Key | b64enc) }}
{{- $fromCustom := genSignedCert "c" nil nil 1 $custom }}
apiVersion: v1
kind: ConfigMap
metadata:
  name: crypto
data:
  ca.crt: {{ $ca.Cert | b64enc }}
  ca.key: {{ $ca.Key | b64enc }}
  tls.crt: {{ $cert.Cert | b64enc }}
  tls.key: {{ $cert.Key | b64enc }}
  self.crt: {{ $self.Cert | b64enc }}
  self.key: {{ $self.Key | b64enc }}
  ec.key: {{ $ec | b64enc }}
  ed.key: {{ $ed | b64enc }}
  caEc.crt: {{ $caEc.Cert | b64enc }}
  caEc.key: {{ $caEc.Key | b64enc }}
  signedEd.crt: {{ $signedEd.Cert | b64enc }}
  signedEd.key: {{ $signedEd.Key | b64enc }}
  selfEd.crt: {{ $selfEd.Cert | b64enc }}
  custom.crt: {{ $custom.Cert | b64enc }}
  fromCustom.crt: {{ $fromCustom.Cert | b64enc }}
  bcrypt: {{ bcrypt "pw" | b64enc }}
  htpasswd: {{ htpasswd "user" "pw" | b64enc }}
  randBytes: {{ randBytes 24 | b64enc }}
  aes: {{ encryptAES "key" "some text" | b64enc }}
  aesBack: {{ encryptAES "key" "some text" | decryptAES "key" | b64enc }}
  shuffle: {{ shuffle "abcdefghij" | b64enc }}
  uuid: {{ uuidv4 | b64enc }}
  printed: {{ printf "%v" $ca | b64enc }}
  json: {{ $ca | toJson | b64enc }}
"#;

/// Certificates, keys, hashes and ciphertexts from one render of each have the same shape.
#[test]
fn crypto_functions_give_helms_shapes() {
    let dir = chart(CERTS);
    let ours = render_pallet(dir.path(), 7).expect("pallet renders");
    let theirs = render_helm(dir.path()).expect("helm renders");
    assert_eq!(
        ours.keys().collect::<Vec<_>>(),
        theirs.keys().collect::<Vec<_>>()
    );
    let mut wrong = Vec::new();
    let days = [
        ("ca.crt", 365),
        ("tls.crt", 30),
        ("self.crt", 10),
        ("caEc.crt", 5),
        ("signedEd.crt", 7),
        ("selfEd.crt", 3),
        ("fromCustom.crt", 1),
    ];
    for (name, d) in days {
        let (a, b) = (cert_shape(&ours[name]), cert_shape(&theirs[name]));
        if a != b {
            wrong.push(format!("{name}:\n--- pallet\n{a}\n--- helm\n{b}"));
        }
        let (from, to) = validity(&ours[name]);
        assert_eq!(
            (from, to - from),
            (NOW, d * 86_400),
            "{name}: pallet's validity"
        );
        let (from, to) = validity(&theirs[name]);
        assert_eq!(to - from, d * 86_400, "{name}: helm's validity");
    }
    assert_eq!(
        ours["custom.crt"], ours["ca.crt"],
        "buildCustomCert keeps the PEM"
    );
    for side in [&ours, &theirs] {
        assert!(
            verifies(&side["ca.crt"], &side["tls.crt"]),
            "signed by the CA"
        );
        assert!(
            verifies(&side["caEc.crt"], &side["signedEd.crt"]),
            "signed by the EC CA"
        );
        assert!(
            verifies(&side["ca.crt"], &side["fromCustom.crt"]),
            "signed by the custom CA"
        );
        assert!(
            !verifies(&side["caEc.crt"], &side["tls.crt"]),
            "not by another CA"
        );
    }
    for name in [
        "ca.key",
        "tls.key",
        "self.key",
        "ec.key",
        "ed.key",
        "caEc.key",
        "signedEd.key",
    ] {
        let (a, b) = (key_shape(&ours[name]), key_shape(&theirs[name]));
        if a != b {
            wrong.push(format!("{name}: pallet {a:?}, helm {b:?}"));
        }
    }
    assert!(wrong.is_empty(), "{}", wrong.join("\n"));
    // The key a WithKey function is given is the certificate's key.
    assert_eq!(ours["caEc.key"], ours["ec.key"]);
    assert_eq!(ours["signedEd.key"], ours["ed.key"]);

    for side in [&ours, &theirs] {
        let hash = &side["bcrypt"];
        assert!(hash.starts_with("$2a$10$") && hash.len() == 60, "{hash}");
        assert!(bcrypt::verify("pw", hash).expect("bcrypt hash"), "{hash}");
        let (user, hash) = side["htpasswd"].split_once(':').expect("user:hash");
        assert_eq!(user, "user");
        assert!(bcrypt::verify("pw", hash).expect("bcrypt hash"));
        let bytes = base64::engine::general_purpose::STANDARD
            .decode(&side["randBytes"])
            .expect("randBytes is base64");
        assert_eq!(bytes.len(), 24);
        assert_eq!(side["aesBack"], "some text");
        let mut chars: Vec<char> = side["shuffle"].chars().collect();
        chars.sort_unstable();
        assert_eq!(chars.into_iter().collect::<String>(), "abcdefghij");
        assert_eq!(side["uuid"].len(), 36);
        // A certificate is a struct: `{Cert Key}` printed, a two-field object in JSON.
        let (cert, key) = (&side["ca.crt"], &side["ca.key"]);
        assert_eq!(side["printed"], format!("{{{cert} {key}}}"));
        let json: serde_json::Value = serde_json::from_str(&side["json"]).expect("JSON");
        assert_eq!(json, serde_json::json!({"Cert": cert, "Key": key}));
    }
    assert_eq!(ours["aes"].len(), theirs["aes"].len());

    // Each side decrypts the other's ciphertext.
    let back = chart(&format!(
        "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: crypto\ndata:\n  fromHelm: {{{{ decryptAES \"key\" {:?} | b64enc }}}}\n  fromPallet: {{{{ decryptAES \"key\" {:?} | b64enc }}}}\n",
        theirs["aes"], ours["aes"]
    ));
    for side in [
        render_pallet(back.path(), 1).expect("pallet decrypts"),
        render_helm(back.path()).expect("helm decrypts"),
    ] {
        assert_eq!(side["fromHelm"], "some text");
        assert_eq!(side["fromPallet"], "some text");
    }
}

/// The same seed gives the same keys, certificates, hashes and bytes; another seed others.
#[test]
fn crypto_output_is_a_function_of_the_seed() {
    let dir = chart(CERTS);
    let a = render_pallet(dir.path(), 11).expect("render");
    let b = render_pallet(dir.path(), 11).expect("render");
    let c = render_pallet(dir.path(), 12).expect("render");
    assert_eq!(a, b);
    for key in [
        "ca.crt",
        "ca.key",
        "tls.crt",
        "ec.key",
        "ed.key",
        "bcrypt",
        "randBytes",
        "aes",
    ] {
        assert_ne!(a[key], c[key], "{key} should change with the seed");
    }
}

/// genPrivateKey's key types and sizes (RSA 4096, DSA L2048N256) and PEM blocks; a DSA key
/// cannot sign a certificate in Go, nor here.
#[test]
fn generated_private_keys_have_sprigs_types_and_sizes() {
    let dir = chart(
        "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: crypto\ndata:\n  rsa: {{ genPrivateKey \"rsa\" | b64enc }}\n  default: {{ genPrivateKey \"\" | b64enc }}\n  dsa: {{ genPrivateKey \"dsa\" | b64enc }}\n",
    );
    let ours = render_pallet(dir.path(), 3).expect("pallet renders");
    let theirs = render_helm(dir.path()).expect("helm renders");
    for name in ["rsa", "default", "dsa"] {
        assert_eq!(key_shape(&ours[name]), key_shape(&theirs[name]), "{name}");
    }
    assert!(key_shape(&ours["rsa"]).1.contains("4096 bit"));
    assert!(key_shape(&ours["dsa"]).1.contains("2048 bit"));

    let signing = chart(&format!(
        "x: {{{{ genCAWithKey \"x\" 1 {:?} }}}}\n",
        ours["dsa"]
    ));
    let want = "x509: certificate private key does not implement crypto.Signer";
    let ours = render_pallet(signing.path(), 1).expect_err("pallet must fail");
    let theirs = render_helm(signing.path()).expect_err("helm must fail");
    assert!(
        ours.contains(want) && theirs.contains(want),
        "pallet: {ours}\nhelm: {theirs}"
    );
}
