//! What the translator and the runtime both need to know about helm's functions: Sprig's
//! aliases and the Go parameter types text/template checks arguments against.

/// Sprig names that are the same function as another here: the `must*` variants (our plain
/// versions already return errors instead of panicking) and old spellings.
pub const ALIASES: &[(&str, &str)] = &[
    // Sprig's deprecated snake_case spellings.
    ("date_modify", "dateModify"),
    ("date_in_zone", "dateInZone"),
    ("must_date_modify", "mustDateModify"),
    ("mustMerge", "merge"),
    ("mustMergeOverwrite", "mergeOverwrite"),
    ("mustAppend", "append"),
    ("push", "append"),
    ("mustPush", "append"),
    ("mustChunk", "chunk"),
    ("mustPrepend", "prepend"),
    ("mustFirst", "first"),
    ("mustLast", "last"),
    ("mustRest", "rest"),
    ("mustInitial", "initial"),
    ("mustUniq", "uniq"),
    ("mustWithout", "without"),
    ("mustHas", "has"),
    ("mustCompact", "compact"),
    ("mustDeepCopy", "deepCopy"),
    ("mustReverse", "reverse"),
    ("mustSlice", "slice"),
    ("biggest", "max"),
    ("trimall", "trimAll"),
    // filepath on a Unix host is path.
    ("osBase", "base"),
    ("osClean", "clean"),
    ("osDir", "dir"),
    ("osExt", "ext"),
    ("osIsAbs", "isAbs"),
];

/// The function an alias stands for (or `name` itself).
pub fn lookup_name(name: &str) -> &str {
    ALIASES
        .iter()
        .find(|(a, _)| *a == name)
        .map(|(_, t)| *t)
        .unwrap_or(name)
}

/// Go parameter types of the functions, one letter per parameter: `S` string, `I` int, `B`
/// bool, `M` map[string]interface{}, `A` interface{}, `U` uint32, `L` []interface{}, `C`
/// Sprig's certificate struct; a trailing `*` makes the last one
/// variadic. text/template checks arguments against these before calling, so passing a float64
/// from values where an int is wanted, or a missing value (a nil interface) where a string is
/// wanted, is an error in helm; it must be one here too, never a silent conversion. Functions
/// not listed take `interface{}` arguments and check for themselves.
pub const SIGNATURES: &[(&str, &str)] = &[
    ("ternary", "AAB"),
    ("required", "SA"),
    ("fail", "S"),
    ("semver", "S"),
    ("semverCompare", "SS"),
    ("fromYaml", "S"),
    ("fromYamlArray", "S"),
    ("fromJson", "S"),
    ("fromJsonArray", "S"),
    ("indent", "IS"),
    ("nindent", "IS"),
    ("trim", "S"),
    ("trimAll", "SS"),
    ("trimPrefix", "SS"),
    ("trimSuffix", "SS"),
    ("trunc", "IS"),
    ("upper", "S"),
    ("lower", "S"),
    ("title", "S"),
    ("replace", "SSS"),
    ("contains", "SS"),
    ("hasPrefix", "SS"),
    ("hasSuffix", "SS"),
    ("repeat", "IS"),
    ("splitList", "SS"),
    ("split", "SS"),
    ("splitn", "SIS"),
    ("join", "SA"),
    ("get", "MS"),
    ("set", "MSA"),
    ("unset", "MS"),
    ("hasKey", "MS"),
    ("keys", "M*"),
    ("values", "M"),
    ("pluck", "SM*"),
    ("merge", "MM*"),
    ("mergeOverwrite", "MM*"),
    ("pick", "MS*"),
    ("omit", "MS*"),
    ("append", "AA"),
    ("prepend", "AA"),
    ("has", "AA"),
    ("until", "I"),
    ("untilStep", "III"),
    ("sub", "AA"),
    ("div", "AA"),
    ("mod", "AA"),
    ("atoi", "S"),
    ("b64enc", "S"),
    ("b64dec", "S"),
    ("sha256sum", "S"),
    ("sha1sum", "S"),
    ("adler32sum", "S"),
    ("kindIs", "SA"),
    ("typeIs", "SA"),
    ("printf", "SA*"),
    ("regexMatch", "SS"),
    ("mustRegexMatch", "SS"),
    ("regexFind", "SS"),
    ("regexFindAll", "SSI"),
    ("regexSplit", "SSI"),
    ("regexReplaceAll", "SSS"),
    ("regexReplaceAllLiteral", "SSS"),
    ("mustRegexFind", "SS"),
    ("mustRegexFindAll", "SSI"),
    ("mustRegexSplit", "SSI"),
    ("mustRegexReplaceAll", "SSS"),
    ("mustRegexReplaceAllLiteral", "SSS"),
    ("lookup", "SSSS"),
    ("nospace", "S"),
    ("substr", "IIS"),
    ("abbrev", "IS"),
    ("snakecase", "S"),
    ("kebabcase", "S"),
    ("camelcase", "S"),
    ("randAlphaNum", "I"),
    ("randAlpha", "I"),
    ("randNumeric", "I"),
    ("randAscii", "I"),
    ("uuidv4", ""),
    ("add1f", "A"),
    ("subf", "AA*"),
    ("mulf", "AA*"),
    ("divf", "AA*"),
    ("maxf", "AA*"),
    ("minf", "AA*"),
    ("chunk", "IA"),
    ("b32enc", "S"),
    ("b32dec", "S"),
    ("swapcase", "S"),
    ("initials", "S"),
    ("untitle", "S"),
    ("base", "S"),
    ("dir", "S"),
    ("ext", "S"),
    ("clean", "S"),
    ("isAbs", "S"),
    ("sha512sum", "S"),
    ("regexQuoteMeta", "S"),
    ("typeIsLike", "SA"),
    ("toDecimal", "A"),
    ("duration", "A"),
    ("durationRound", "A"),
    ("toDate", "SS"),
    ("mustToDate", "SS"),
    ("dateModify", "SA"),
    ("mustDateModify", "SA"),
    ("ago", "A"),
    ("htmlDateInZone", "AS"),
    ("randInt", "II"),
    ("plural", "SSI"),
    ("round", "AIA*"),
    ("seq", "I*"),
    ("deepEqual", "AA"),
    ("wrap", "IS"),
    ("wrapWith", "ISS"),
    ("include", "SA"),
    ("tpl", "SA"),
    ("date", "SA"),
    ("dateInZone", "SAS"),
    ("htmlDate", "A"),
    ("unixEpoch", "A"),
    ("now", ""),
    ("genPrivateKey", "S"),
    ("genCA", "SI"),
    ("genCAWithKey", "SIS"),
    ("genSelfSignedCert", "SLLI"),
    ("genSelfSignedCertWithKey", "SLLIS"),
    ("genSignedCert", "SLLIC"),
    ("genSignedCertWithKey", "SLLICS"),
    ("buildCustomCert", "SS"),
    ("bcrypt", "S"),
    ("htpasswd", "SS"),
    ("randBytes", "I"),
    ("encryptAES", "SS"),
    ("decryptAES", "SS"),
    ("derivePassword", "USSSS"),
    ("shuffle", "S"),
    ("abbrevboth", "IIS"),
    ("hello", ""),
    ("mustFromJson", "S"),
    ("urlParse", "S"),
    ("urlJoin", "M"),
    ("getHostByName", "S"),
    ("toToml", "A"),
    ("fromToml", "S"),
    ("toYamlPretty", "A"),
];

/// The signature of `name` (through its alias), looked up once per registered function.
pub fn signature(name: &str) -> Option<&'static str> {
    let target = lookup_name(name);
    SIGNATURES
        .iter()
        .find(|(n, _)| *n == target)
        .map(|(_, s)| *s)
}

/// Whether a literal `nil` as argument `i` of `name` is a nil map in Go (a map parameter),
/// which map functions treat as empty. `set` on a nil map panics in Go, so it is left out.
pub fn nil_is_empty_map(name: &str, i: usize) -> bool {
    if name == "set" {
        return false;
    }
    let Some(sig) = signature(name) else {
        return false;
    };
    let params = sig.trim_end_matches('*').as_bytes();
    params
        .get(i)
        .or(params.last().filter(|_| sig.ends_with('*')))
        == Some(&b'M')
}
