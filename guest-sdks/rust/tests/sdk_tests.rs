//! Native unit tests of the Rust SDK: the MessagePack reader and writer,
//! host answers, and the export side (registration and dispatch) driven
//! without a host.
//!
//! `tests/sdks/test_rust_sdk.py` builds the SDK for this machine, compiles
//! this file with `rustc --test` and runs it with `WASMEXT_CASES` naming a
//! tab-separated file written from `abi/vectors/*.json` and `abi/abi.toml`,
//! so that the vectors stay the single source of truth and no JSON or TOML
//! parser is needed here.

use wasmext::msgpack::{self, utf8_valid, validate, validate_utf8, Error, Kind, Reader, Token};
use wasmext::{abi, Answer, Call, Handler, Hook, Plugin, Registration, Reply, Value, Writer};

// ---- helpers ----------------------------------------------------------------

fn unhex(s: &str) -> Vec<u8> {
    assert!(s.len() % 2 == 0, "odd hex {:?}", s);
    (0..s.len())
        .step_by(2)
        .map(|i| u8::from_str_radix(&s[i..i + 2], 16).unwrap())
        .collect()
}

fn hex(b: &[u8]) -> String {
    b.iter().map(|x| format!("{:02x}", x)).collect()
}

/// Decode with the token reader and encode again with the writer.
fn copy(bytes: &[u8]) -> Result<Vec<u8>, Error> {
    let mut r = Reader::new(bytes);
    let mut w = Writer::new();
    w.copy_value(&mut r)?;
    r.finish()?;
    Ok(w.into_bytes().unwrap())
}

/// Every way the SDK reads a whole document must agree on "refused".
fn assert_refused(name: &str, bytes: &[u8]) {
    assert!(
        validate_utf8(bytes).is_err(),
        "{}: validate_utf8 accepted {}",
        name,
        hex(bytes)
    );
    assert!(
        Value::decode(bytes).is_err(),
        "{}: Value::decode accepted {}",
        name,
        hex(bytes)
    );
    assert!(
        copy(bytes).is_err(),
        "{}: copy_value accepted {}",
        name,
        hex(bytes)
    );
}

/// A small deterministic PRNG (xorshift64*), so failures reproduce.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_f491_4f6c_dd1d)
    }
    fn below(&mut self, n: u64) -> u64 {
        self.next() % n
    }
}

fn nested(depth: usize, open: &[u8], inner: &[u8]) -> Vec<u8> {
    let mut v = Vec::new();
    for _ in 0..depth {
        v.extend_from_slice(open);
    }
    v.extend_from_slice(inner);
    v
}

// ---- vectors from abi/ ------------------------------------------------------

fn cases() -> Vec<Vec<String>> {
    let path = std::env::var("WASMEXT_CASES").expect("WASMEXT_CASES names the cases file");
    let text =
        std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("cannot open {}: {}", path, e));
    text.lines()
        .filter(|l| !l.is_empty())
        .map(|l| l.split('\t').map(str::to_owned).collect())
        .collect()
}

#[test]
fn vector_and_boundary_cases() {
    let rows = cases();
    assert!(!rows.is_empty(), "empty cases file");
    let mut counts = std::collections::BTreeMap::new();
    for row in &rows {
        *counts.entry(row[0].clone()).or_insert(0) += 1;
        let (kind, name) = (row[0].as_str(), row[1].as_str());
        match kind {
            "C" => canonical(name, &unhex(&row[2])),
            "D" => decode_only(name, &unhex(&row[2]), &unhex(&row[3])),
            "H" => hostile(name, &unhex(&row[2])),
            "I" => int_case(name, &unhex(&row[2]), &row[3]),
            "S" | "B" | "A" | "M" => {
                length_case(kind, name, &unhex(&row[2]), row[3].parse().unwrap())
            }
            "K" => abi_case(&row[1..]),
            _ => panic!("unknown case kind {:?}", kind),
        }
    }
    // The K rows must name every constant the SDK has, and nothing else.
    let k = |section: &str| {
        rows.iter()
            .filter(|r| r[0] == "K" && r[1] == section)
            .count()
    };
    assert_eq!(k("limit"), abi::limits::ALL.len(), "limits");
    assert_eq!(k("code"), abi::code::ALL.len(), "error codes");
    assert_eq!(k("op"), abi::OPS.len(), "ops");
    assert_eq!(k("log"), 5, "log levels");
    assert_eq!(k("export"), 7, "exports");
    assert_eq!(k("import"), 2, "imports");
    println!("{} file cases: {:?}", rows.len(), counts);
}

fn canonical(name: &str, bytes: &[u8]) {
    validate_utf8(bytes).unwrap_or_else(|e| panic!("{}: {}", name, e));
    let v = Value::decode(bytes).unwrap_or_else(|e| panic!("{}: {}", name, e));
    assert_eq!(
        hex(&v.encode_to_vec().unwrap()),
        hex(bytes),
        "{}: Value round trip",
        name
    );
    assert_eq!(
        hex(&copy(bytes).unwrap()),
        hex(bytes),
        "{}: token round trip",
        name
    );
    let mut r = Reader::new(bytes);
    assert_eq!(r.read_raw().unwrap(), bytes, "{}: read_raw", name);
    assert!(r.is_at_end());
    for cut in 0..bytes.len() {
        let short = &bytes[..cut];
        assert!(
            validate(short).is_err(),
            "{}: truncated to {} accepted",
            name,
            cut
        );
        assert_refused(name, short);
        assert!(
            Reader::new(short).skip().is_err(),
            "{}: skip of truncation {}",
            name,
            cut
        );
    }
}

fn decode_only(name: &str, bytes: &[u8], canonical_bytes: &[u8]) {
    let v = Value::decode(bytes).unwrap_or_else(|e| panic!("{}: {}", name, e));
    assert_eq!(
        hex(&v.encode_to_vec().unwrap()),
        hex(canonical_bytes),
        "{}",
        name
    );
    assert_eq!(hex(&copy(bytes).unwrap()), hex(canonical_bytes), "{}", name);
}

fn hostile(name: &str, bytes: &[u8]) {
    assert_refused(name, bytes);
}

fn int_case(name: &str, bytes: &[u8], value: &str) {
    let mut w = Writer::new();
    if value.starts_with('-') {
        let v: i64 = value.parse().unwrap();
        w.write_int(v);
        assert_eq!(Reader::new(bytes).read_int().unwrap(), v, "{}", name);
        assert_eq!(
            Reader::new(bytes).read_uint(),
            Err(Error::Range),
            "{}",
            name
        );
    } else {
        let v: u64 = value.parse().unwrap();
        w.write_uint(v);
        assert_eq!(Reader::new(bytes).read_uint().unwrap(), v, "{}", name);
        if v <= i64::MAX as u64 {
            let mut w2 = Writer::new();
            w2.write_int(v as i64);
            assert_eq!(hex(w2.as_bytes()), hex(bytes), "{}: write_int", name);
            assert_eq!(Reader::new(bytes).read_int().unwrap(), v as i64, "{}", name);
        } else {
            assert_eq!(Reader::new(bytes).read_int(), Err(Error::Range), "{}", name);
            assert_eq!(Reader::new(bytes).peek().unwrap(), Token::UInt(v));
        }
    }
    assert_eq!(hex(w.as_bytes()), hex(bytes), "{}: smallest encoding", name);
    assert_eq!(hex(&copy(bytes).unwrap()), hex(bytes), "{}", name);
}

fn length_case(kind: &str, name: &str, header: &[u8], n: usize) {
    let mut w = Writer::new();
    let body: Vec<u8> = match kind {
        "S" => {
            let s = "a".repeat(n);
            w.write_str(&s);
            s.into_bytes()
        }
        "B" => {
            let b = vec![b'a'; n];
            w.write_bin(&b);
            b
        }
        "A" => {
            w.write_array(n);
            let mut items = Vec::new();
            for _ in 0..n {
                w.write_nil();
                items.push(0xc0);
            }
            items
        }
        _ => {
            w.write_map(n);
            let mut pairs = Vec::new();
            for _ in 0..n {
                w.write_str("").write_nil();
                pairs.extend_from_slice(&[0xa0, 0xc0]);
            }
            pairs
        }
    };
    let out = w.into_bytes().unwrap();
    assert_eq!(hex(&out[..header.len()]), hex(header), "{}: header", name);
    assert_eq!(&out[header.len()..], &body[..], "{}: body", name);
    let mut r = Reader::new(&out);
    match kind {
        "S" => assert_eq!(r.read_str().unwrap().len(), n),
        "B" => assert_eq!(r.read_bin().unwrap().len(), n),
        "A" => assert_eq!(r.read_array().unwrap() as usize, n),
        _ => assert_eq!(r.read_map().unwrap() as usize, n),
    }
    assert_eq!(copy(&out).unwrap(), out, "{}: copy", name);
    validate_utf8(&out).unwrap();
    // The same header with the body cut short is refused before anything
    // is read (containers: every item takes at least one byte).
    if n > 0 {
        assert_eq!(
            validate(&out[..out.len() - 1]),
            Err(Error::Truncated),
            "{}",
            name
        );
    }
}

fn abi_case(row: &[String]) {
    let section = row[0].as_str();
    let find_limit = |name: &str| {
        abi::limits::ALL
            .iter()
            .find(|(n, _)| *n == name)
            .map(|(_, v)| *v)
    };
    match section {
        "version" => {
            assert_eq!(row[1].parse::<u32>().unwrap(), abi::ABI_MAJOR, "major");
            assert_eq!(row[2].parse::<u32>().unwrap(), abi::ABI_MINOR, "minor");
        }
        "limit" => {
            let want: u64 = row[2].parse().unwrap();
            assert_eq!(find_limit(&row[1]), Some(want), "limit {}", row[1]);
        }
        "code" => assert!(
            abi::code::ALL.contains(&row[1].as_str()),
            "error code {}",
            row[1]
        ),
        "op" => {
            let info = abi::op_info(&row[1]).unwrap_or_else(|| panic!("op {} missing", row[1]));
            assert_eq!(info.capability, row[2], "capability of {}", row[1]);
            assert_eq!(info.since.to_string(), row[3], "since of {}", row[1]);
            assert_eq!(
                info.implemented,
                row[4] == "implemented",
                "status of {}",
                row[1]
            );
        }
        "log" => {
            let v: i32 = row[2].parse().unwrap();
            let got = match row[1].as_str() {
                "trace" => abi::log_level::TRACE,
                "debug" => abi::log_level::DEBUG,
                "info" => abi::log_level::INFO,
                "warn" => abi::log_level::WARN,
                "error" => abi::log_level::ERROR,
                other => panic!("log level {} missing", other),
            };
            assert_eq!(got, v, "log level {}", row[1]);
            let level = [
                wasmext::Level::Trace,
                wasmext::Level::Debug,
                wasmext::Level::Info,
                wasmext::Level::Warn,
                wasmext::Level::Error,
            ][v as usize];
            assert_eq!(level as i32, v);
        }
        "export" => {
            use abi::export::*;
            let all = [MEMORY, ABI_VERSION, ALLOC, FREE, REGISTER, CALL, INITIALIZE];
            assert!(all.contains(&row[1].as_str()), "export {}", row[1]);
        }
        "import" => {
            assert_eq!(row[1], abi::import::MODULE);
            assert!(
                [abi::import::HOST_CALL, abi::import::LOG].contains(&row[2].as_str()),
                "import {}",
                row[2]
            );
        }
        other => panic!("unknown ABI section {}", other),
    }
}

// ---- reader -----------------------------------------------------------------

#[test]
fn depth_64_is_accepted_and_65_refused() {
    for open in [&[0x91u8][..], &[0x81, 0xa1, b'k'][..]] {
        let ok = nested(64, open, &[0xc0]);
        validate(&ok).unwrap();
        Value::decode(&ok).unwrap();
        assert_eq!(copy(&ok).unwrap(), ok);
        Reader::new(&ok).skip().unwrap();
        let deep = nested(65, open, &[0xc0]);
        assert_eq!(validate(&deep), Err(Error::Depth));
        assert_eq!(Value::decode(&deep), Err(Error::Depth));
        assert_eq!(copy(&deep), Err(Error::Depth));
        // An empty container is a container too.
        let empty = nested(64, open, &[0x90]);
        assert_eq!(validate(&empty), Err(Error::Depth));
        assert_eq!(copy(&empty), Err(Error::Depth));
        validate(&nested(63, open, &[0x90])).unwrap();
    }
    // A hostile depth costs nothing: 1 MB of nesting is refused at 65.
    assert_eq!(validate(&vec![0x91; 1 << 20]), Err(Error::Depth));
}

#[test]
fn huge_declared_lengths_are_refused_before_reading() {
    for bytes in [
        &[0xdb, 0xff, 0xff, 0xff, 0xff, 0x41][..], // str32 4 GiB
        &[0xc6, 0xff, 0xff, 0xff, 0xff, 0x00][..], // bin32 4 GiB
        &[0xdd, 0xff, 0xff, 0xff, 0xff][..],       // array32 4 billion items
        &[0xdf, 0xff, 0xff, 0xff, 0xff][..],       // map32 4 billion pairs
        &[0xdf, 0x80, 0x00, 0x00, 0x00, 0xa0, 0xc0][..],
        &[0xda, 0x00, 0x05, 0x61][..],
        &[0xdc, 0x00, 0x03, 0xc0, 0xc0][..],
        &[0xde, 0x00, 0x02, 0xa0, 0xc0, 0xa0][..],
        &[0x82, 0xa0, 0xc0, 0xa0][..],
    ] {
        assert_eq!(validate(bytes), Err(Error::Truncated), "{}", hex(bytes));
        assert_eq!(
            Reader::new(bytes).peek(),
            Err(Error::Truncated),
            "{}",
            hex(bytes)
        );
        assert_eq!(
            Value::decode(bytes),
            Err(Error::Truncated),
            "{}",
            hex(bytes)
        );
    }
}

#[test]
fn malformed_bytes_are_refused() {
    for b in [0xc1u8, 0xc7, 0xc8, 0xc9, 0xd4, 0xd5, 0xd6, 0xd7, 0xd8] {
        let bytes = [
            b, 0x01, 0x01, 0x01, 0x01, 0x01, 0x01, 0x01, 0x01, 0x01, 0x01, 0x01, 0x01, 0x01, 0x01,
            0x01, 0x01, 0x01,
        ];
        assert_eq!(
            Reader::new(&bytes).peek(),
            Err(Error::Malformed),
            "{:02x}",
            b
        );
    }
    assert_eq!(validate(&[0x81, 0x01, 0x02]), Err(Error::NonStringKey));
    assert_eq!(
        validate(&[0x81, 0xc4, 0x00, 0x02]),
        Err(Error::NonStringKey)
    );
    assert_eq!(
        validate(&[0x91, 0x81, 0x90, 0x02]),
        Err(Error::NonStringKey)
    );
    assert_eq!(validate(&[0x80, 0xc0]), Err(Error::Trailing));
    assert_eq!(validate(&[]), Err(Error::Truncated));
    // Plain validate does not check UTF-8; validate_utf8 does.
    validate(&[0xa2, 0xff, 0xff]).unwrap();
    assert_eq!(validate_utf8(&[0xa2, 0xff, 0xff]), Err(Error::Utf8));
    assert_eq!(validate_utf8(&[0x81, 0xa1, 0xff, 0xc0]), Err(Error::Utf8));
}

#[test]
fn typed_reads_leave_the_cursor_on_error() {
    let bytes = [0xa3, b'a', b'b', b'c', 0x05];
    let mut r = Reader::new(&bytes);
    assert_eq!(r.read_int(), Err(Error::Type));
    assert_eq!(r.read_bool(), Err(Error::Type));
    assert_eq!(r.read_nil(), Err(Error::Type));
    assert_eq!(r.read_bin(), Err(Error::Type));
    assert_eq!(r.read_array(), Err(Error::Type));
    assert_eq!(r.read_map(), Err(Error::Type));
    assert_eq!(r.read_f64(), Err(Error::Type));
    assert_eq!(r.position(), 0);
    assert_eq!(r.peek_kind(), Ok(Kind::Str));
    assert_eq!(r.read_str(), Ok("abc"));
    assert_eq!(r.read_int_as::<u8>(), Ok(5));
    assert!(r.is_at_end());
    r.finish().unwrap();

    let big = [0xcd, 0x01, 0x00]; // 256
    assert_eq!(Reader::new(&big).read_int_as::<u8>(), Err(Error::Range));
    assert_eq!(Reader::new(&big).read_int_as::<i16>(), Ok(256));
    assert_eq!(Reader::new(&[0xff]).read_uint(), Err(Error::Range));
    assert_eq!(
        Reader::new(&[0xca, 0x3f, 0xc0, 0x00, 0x00]).read_f64(),
        Ok(1.5)
    );
    assert_eq!(Reader::new(&[0x07]).read_f64(), Ok(7.0));
    let mut bad = Reader::new(&[0xa2, 0xff, 0xfe]);
    assert_eq!(bad.read_str(), Err(Error::Utf8));
    assert_eq!(bad.position(), 0);
}

#[test]
fn find_reads_map_values() {
    let doc = Value::Map(vec![
        ("a".into(), Value::Int(1)),
        (
            "nested".into(),
            Value::Array(vec![Value::Nil, Value::Map(vec![])]),
        ),
        ("s".into(), Value::Str("x".into())),
    ])
    .encode_to_vec()
    .unwrap();
    let r = Reader::new(&doc);
    assert_eq!(r.find("s").unwrap().unwrap().read_str(), Ok("x"));
    assert_eq!(r.find("a").unwrap().unwrap().read_int(), Ok(1));
    assert!(r.find("zz").unwrap().is_none());
    assert_eq!(r.position(), 0);
    assert_eq!(Reader::new(&[0x90]).find("a").unwrap_err(), Error::Type);
    assert_eq!(
        Reader::new(&[0x81, 0x01, 0x02]).find("a").unwrap_err(),
        Error::NonStringKey
    );
}

#[test]
fn utf8_check_agrees_with_std() {
    // Every sequence of one, two and three bytes.
    let mut buf = [0u8; 3];
    for a in 0..=255u8 {
        buf[0] = a;
        assert_eq!(
            utf8_valid(&buf[..1]),
            std::str::from_utf8(&buf[..1]).is_ok(),
            "{:02x}",
            a
        );
        for b in 0..=255u8 {
            buf[1] = b;
            assert_eq!(
                utf8_valid(&buf[..2]),
                std::str::from_utf8(&buf[..2]).is_ok(),
                "{}",
                hex(&buf[..2])
            );
            for c in 0..=255u8 {
                buf[2] = c;
                assert_eq!(
                    utf8_valid(&buf),
                    std::str::from_utf8(&buf).is_ok(),
                    "{}",
                    hex(&buf)
                );
            }
        }
    }
    // Four bytes: every lead and first continuation, the other two from a
    // set covering every class.
    let probes = [
        0x00u8, 0x41, 0x7f, 0x80, 0x8f, 0x90, 0x9f, 0xa0, 0xbf, 0xc0, 0xc2, 0xe0, 0xf0, 0xff,
    ];
    for a in 0..=255u8 {
        for b in 0..=255u8 {
            for &c in &probes {
                for &d in &probes {
                    let s = [a, b, c, d];
                    assert_eq!(
                        utf8_valid(&s),
                        std::str::from_utf8(&s).is_ok(),
                        "{}",
                        hex(&s)
                    );
                }
            }
        }
    }
    // Runs of two-byte characters with one bad byte anywhere (the word-wise
    // path checks four pairs at once).
    let run: Vec<u8> = "ДОМαβγ".repeat(6).into_bytes();
    for at in 0..run.len() {
        for bad in [0x00u8, 0x41, 0x80, 0xbf, 0xc0, 0xc1, 0xc2, 0xdf, 0xe0, 0xff] {
            let mut t = run.clone();
            t[at] = bad;
            for start in 0..4 {
                let t = &t[start..];
                assert_eq!(utf8_valid(t), std::str::from_utf8(t).is_ok(), "{}", hex(t));
            }
        }
    }
    // Random text from a biased alphabet, at every alignment and length.
    let pieces: [&[u8]; 14] = [
        "дом".as_bytes(),
        b"\xc1\x81",
        b"a",
        b"hello ",
        "é".as_bytes(),
        "✓".as_bytes(),
        "😀".as_bytes(),
        b"\x80",
        b"\xc3",
        b"\xe2\x9c",
        b"\xf0\x9f\x98",
        b"\xed\xa0\x80",
        b"\xf4\x90\x80\x80",
        b"0123456789abcdef",
    ];
    let mut rng = Rng(0x1234_5678_9abc_def1);
    for _ in 0..200_000 {
        let mut s = Vec::new();
        for _ in 0..rng.below(12) {
            s.extend_from_slice(pieces[rng.below(pieces.len() as u64) as usize]);
        }
        let cut = rng.below(s.len() as u64 + 1) as usize;
        for t in [&s[..], &s[..cut], &s[cut..]] {
            assert_eq!(utf8_valid(t), std::str::from_utf8(t).is_ok(), "{}", hex(t));
        }
    }
}

#[test]
fn mutation_fuzzing_never_panics_and_round_trips() {
    let seeds: Vec<Vec<u8>> = vec![
        Value::Map(vec![
            ("hook".into(), Value::Str("on_tag".into())),
            (
                "data".into(),
                Value::Array(vec![
                    Value::Int(-7),
                    Value::UInt(u64::MAX),
                    Value::Float(0.5),
                    Value::Bin(vec![1, 2, 3]),
                    Value::Str("héllo ✓".into()),
                    Value::Bool(true),
                    Value::Nil,
                ]),
            ),
        ])
        .encode_to_vec()
        .unwrap(),
        nested(10, &[0x91], &[0xc0]),
        vec![
            0xdc, 0x00, 0x03, 0xcd, 0x01, 0x00, 0xd1, 0x80, 0x00, 0xcb, 0, 0, 0, 0, 0, 0, 0, 0,
        ],
    ];
    let mut rng = Rng(42);
    for i in 0..300_000 {
        let mut m = seeds[i % seeds.len()].clone();
        for _ in 0..=rng.below(3) {
            let at = rng.below(m.len() as u64) as usize;
            match rng.below(3) {
                0 => m[at] = rng.next() as u8,
                1 => m.truncate(at),
                _ => m.insert(at, rng.next() as u8),
            }
            if m.is_empty() {
                break;
            }
        }
        let checked = validate_utf8(&m);
        let value = Value::decode(&m);
        let copied = copy(&m);
        assert_eq!(checked.is_ok(), value.is_ok(), "{}", hex(&m));
        assert_eq!(checked.is_ok(), copied.is_ok(), "{}", hex(&m));
        if let (Ok(v), Ok(c)) = (value, copied) {
            // Canonical bytes decode to the same value (floats compared by bits).
            let again = Value::decode(&c).unwrap();
            assert_eq!(format!("{:?}", again), format!("{:?}", v), "{}", hex(&m));
            assert_eq!(v.encode_to_vec().unwrap(), c, "{}", hex(&m));
        }
    }
}

// ---- writer -----------------------------------------------------------------

#[test]
fn writer_encodes_rust_values() {
    use std::collections::BTreeMap;
    let mut m = BTreeMap::new();
    m.insert("b", vec![Some(1u8), None]);
    m.insert("a", vec![]);
    let bytes = wasmext::to_vec(&(1i32, "x", wasmext::Bin(&[7]), m, -1.5f64, ())).unwrap();
    let v = Value::decode(&bytes).unwrap();
    assert_eq!(
        v,
        Value::Array(vec![
            Value::Int(1),
            Value::Str("x".into()),
            Value::Bin(vec![7]),
            Value::Map(vec![
                ("a".into(), Value::Array(vec![])),
                ("b".into(), Value::Array(vec![Value::Int(1), Value::Nil]))
            ]),
            Value::Float(-1.5),
            Value::Nil,
        ])
    );
    let mut w = Writer::new();
    w.write_map(1)
        .write_str("k")
        .write(&wasmext::Raw(&[0x93, 1, 2, 3]));
    assert_eq!(w.as_bytes(), &[0x81, 0xa1, b'k', 0x93, 1, 2, 3]);
    w.clear();
    assert!(w.is_empty());
    assert_eq!(w.check(), Ok(()));
}

#[test]
fn copy_value_on_error_writes_nothing_and_keeps_the_cursor() {
    let mut w = Writer::new();
    w.write_array(2).write_int(1);
    let before = w.as_bytes().to_vec();
    let bad = [0x92, 0x01, 0xa2, 0xff, 0xff];
    let mut r = Reader::new(&bad);
    assert_eq!(w.copy_value(&mut r), Err(Error::Utf8));
    assert_eq!(r.position(), 0);
    assert_eq!(w.as_bytes(), &before[..]);
}

// ---- host answers -----------------------------------------------------------

#[test]
fn answers_decode_both_shapes() {
    let ok = wasmext::to_vec(&Value::Map(vec![
        ("ok".into(), Value::Bool(true)),
        ("value".into(), Value::Str("Servus".into())),
    ]))
    .unwrap();
    let a = Answer::decode(ok.clone());
    assert!(a.is_ok());
    assert_eq!(a.value_str().unwrap(), "Servus");
    assert_eq!(a.raw(), &ok[..]);
    assert_eq!(a.code(), "");
    assert!(a.check().is_ok());

    let no_value = Answer::decode(vec![0x81, 0xa2, b'o', b'k', 0xc3]);
    assert!(no_value.is_ok());
    assert_eq!(no_value.value_bytes(), &[0xc0]);

    let err = wasmext::to_vec(&Value::Map(vec![
        ("ok".into(), Value::Bool(false)),
        (
            "error".into(),
            Value::Map(vec![
                ("code".into(), Value::Str("not_found".into())),
                ("message".into(), Value::Str("no such setting".into())),
            ]),
        ),
    ]))
    .unwrap();
    let a = Answer::decode(err);
    assert!(!a.is_ok());
    assert!(a.is(abi::code::NOT_FOUND));
    assert_eq!(a.message(), "no such setting");
    assert_eq!(a.value_bytes(), &[0xc0]);
    let e = a.check().unwrap_err();
    assert_eq!((e.code(), e.message()), ("not_found", "no such setting"));

    // No message is an empty one.
    let bare = wasmext::to_vec(&Value::Map(vec![
        ("ok".into(), Value::Bool(false)),
        (
            "error".into(),
            Value::Map(vec![("code".into(), Value::Str("denied".into()))]),
        ),
    ]))
    .unwrap();
    let a = Answer::decode(bare);
    assert_eq!((a.code(), a.message()), ("denied", ""));

    // Anything else becomes a local `internal` error.
    for bad in [
        vec![],
        vec![0xc0],
        vec![0x80],
        vec![0x81, 0xa2, b'o', b'k', 0x01],
        vec![0x81, 0xa2, b'o', b'k', 0xc2],
        vec![0x81, 0xa2, b'o', b'k', 0xc3, 0xc0],
        vec![
            0x82, 0xa2, b'o', b'k', 0xc2, 0xa5, b'e', b'r', b'r', b'o', b'r', 0x90,
        ],
    ] {
        let a = Answer::decode(bad.clone());
        assert!(a.is(abi::code::INTERNAL), "{}", hex(&bad));
        validate_utf8(a.raw()).unwrap();
    }
}

#[test]
fn host_calls_without_a_host_are_internal_errors() {
    // Off wasm the raw import answers 0: "no answer", an internal error.
    let a = wasmext::config_get("greeting");
    assert!(a.is(abi::code::INTERNAL));
    let e = a.error();
    assert_eq!(e.code(), "internal");
}

// ---- exports: registration and dispatch --------------------------------------

#[derive(Default)]
struct TestPlugin {
    calls: u32,
    id: String,
}

impl Plugin for TestPlugin {
    const NAME: &'static str = "test";
    const VERSION: &'static str = "1.2.3";
    const HOOKS: &'static [Hook<Self>] = &[
        Hook::new("value", Handler(Self::value)),
        Hook::new("nothing", Handler(Self::nothing)).priority(90),
        Hook::new("miscount", Handler(Self::miscount)),
        Hook::new("stop_bare", Handler(Self::stop_bare)),
        Hook::new("stop_value", Handler(Self::stop_value)),
        Hook::new("fail_quiet", Handler(Self::fail_quiet)),
        Hook::new("fail_after_write", Handler(Self::fail_after_write)),
        Hook::new("on_tag", Handler(Self::upper)).pattern("upper"),
        Hook::new("on_tag", Handler(Self::redact))
            .pattern("redact*")
            .priority(0),
        Hook::passive("on_event"),
    ];

    fn init(&mut self, reg: &Registration<'_>) {
        self.id = reg.plugin_id().to_owned();
    }

    fn register_extra(&self, w: &mut Writer) -> usize {
        w.write_str("prompt").write_str("be nice");
        1
    }
}

impl TestPlugin {
    fn value(&mut self, call: &mut Call) -> wasmext::Result<Reply> {
        self.calls += 1;
        let n = self.calls;
        let id = self.id.clone();
        call.reply(&(n, id, call.hook()))
    }
    fn nothing(&mut self, _call: &mut Call) -> wasmext::Result<Reply> {
        Ok(Reply::Value)
    }
    fn miscount(&mut self, call: &mut Call) -> wasmext::Result<Reply> {
        call.out().write_array(3).write_int(1);
        Ok(Reply::Value)
    }
    fn stop_bare(&mut self, _call: &mut Call) -> wasmext::Result<Reply> {
        Ok(Reply::Stop)
    }
    fn stop_value(&mut self, call: &mut Call) -> wasmext::Result<Reply> {
        call.out().write_str("last");
        Ok(Reply::Stop)
    }
    fn fail_quiet(&mut self, _call: &mut Call) -> wasmext::Result<Reply> {
        Err(wasmext::Error::new("conflict", ""))
    }
    fn fail_after_write(&mut self, call: &mut Call) -> wasmext::Result<Reply> {
        call.out().write_array(2);
        Err(wasmext::Error::failed("gave up"))
    }
    fn upper(&mut self, call: &mut Call) -> wasmext::Result<Reply> {
        let text = call
            .data()
            .find("text")?
            .ok_or_else(|| wasmext::Error::invalid("no text"))?
            .read_str()?;
        call.reply_str(&text.to_uppercase())
    }
    fn redact(&mut self, call: &mut Call) -> wasmext::Result<Reply> {
        call.reply_str("[redacted]")
    }
}

fn val(pairs: &[(&str, Value)]) -> Value {
    Value::Map(
        pairs
            .iter()
            .map(|(k, v)| (k.to_string(), v.clone()))
            .collect(),
    )
}

fn s(x: &str) -> Value {
    Value::Str(x.into())
}

fn register(state: &mut Option<TestPlugin>) -> Value {
    let req = val(&[
        (
            "abi",
            val(&[("major", Value::Int(1)), ("minor", Value::Int(0))]),
        ),
        (
            "host",
            val(&[("name", s("wasmext")), ("version", s("0.1.0"))]),
        ),
        ("plugin", val(&[("id", s("t-1"))])),
        ("settings", val(&[("greeting", s("hi"))])),
    ]);
    wasmext::__rt::register::<TestPlugin>(
        &req.encode_to_vec().unwrap(),
        state,
        TestPlugin::default,
    );
    Value::decode(&wasmext::__rt::last_output()).unwrap()
}

fn call_raw(state: &mut Option<TestPlugin>, request: &[u8]) -> Value {
    wasmext::__rt::call::<TestPlugin>(request, state, TestPlugin::default);
    let out = wasmext::__rt::last_output();
    validate_utf8(&out).unwrap();
    Value::decode(&out).unwrap()
}

fn call(state: &mut Option<TestPlugin>, hook: &str, data: Value) -> Value {
    let req = val(&[("hook", s(hook)), ("data", data)])
        .encode_to_vec()
        .unwrap();
    call_raw(state, &req)
}

fn error_code(resp: &Value) -> (String, String) {
    assert_eq!(resp.get("ok"), Some(&Value::Bool(false)), "{:?}", resp);
    let e = resp.get("error").unwrap();
    let msg = e
        .get("message")
        .and_then(Value::as_str)
        .unwrap_or("")
        .to_owned();
    (e.get("code").unwrap().as_str().unwrap().to_owned(), msg)
}

#[test]
fn registration_map() {
    let mut state = None;
    let reg = register(&mut state);
    assert_eq!(reg.get("abi_minor"), Some(&Value::Int(i64::from(wasmext::abi::ABI_MINOR))));
    assert_eq!(reg.get("name"), Some(&s("test")));
    assert_eq!(reg.get("version"), Some(&s("1.2.3")));
    assert_eq!(reg.get("prompt"), Some(&s("be nice")));
    let hooks = reg.get("hooks").unwrap().as_array().unwrap();
    assert_eq!(hooks.len(), TestPlugin::HOOKS.len());
    // "priority" only where the author set one; "pattern" only with one.
    assert_eq!(hooks[0], val(&[("hook", s("value"))]));
    assert_eq!(
        hooks[1],
        val(&[("hook", s("nothing")), ("priority", Value::Int(90))])
    );
    assert_eq!(
        hooks[8],
        val(&[
            ("hook", s("on_tag")),
            ("priority", Value::Int(0)),
            ("pattern", s("redact*"))
        ])
    );
    assert_eq!(state.as_ref().unwrap().id, "t-1");
    assert_eq!(wasmext::plugin_id(), "t-1");
    assert_eq!(wasmext::host_abi_minor(), 0);
}

#[test]
fn dispatch_and_envelopes() {
    let mut state = None;
    register(&mut state);
    let ok_value = |v: Value| val(&[("ok", Value::Bool(true)), ("value", v)]);
    assert_eq!(
        call(&mut state, "value", Value::Nil),
        ok_value(Value::Array(vec![Value::Int(1), s("t-1"), s("value")]))
    );
    // The instance lives on between calls.
    assert_eq!(
        call(&mut state, "value", Value::Nil),
        ok_value(Value::Array(vec![Value::Int(2), s("t-1"), s("value")]))
    );
    assert_eq!(
        error_code(&call(&mut state, "nothing", Value::Nil)).0,
        "failed"
    );
    let (code, msg) = error_code(&call(&mut state, "miscount", Value::Nil));
    assert_eq!(code, "failed");
    assert!(msg.contains("malformed"), "{}", msg);
    assert_eq!(
        call(&mut state, "stop_bare", Value::Nil),
        val(&[("ok", Value::Bool(true)), ("stop", Value::Bool(true))])
    );
    assert_eq!(
        call(&mut state, "stop_value", Value::Nil),
        val(&[
            ("ok", Value::Bool(true)),
            ("value", s("last")),
            ("stop", Value::Bool(true))
        ])
    );
    // An empty message is left out.
    let quiet = call(&mut state, "fail_quiet", Value::Nil);
    assert_eq!(
        quiet,
        val(&[
            ("ok", Value::Bool(false)),
            ("error", val(&[("code", s("conflict"))]))
        ])
    );
    assert_eq!(
        error_code(&call(&mut state, "fail_after_write", Value::Nil)),
        ("failed".to_owned(), "gave up".to_owned())
    );
    assert_eq!(
        call(&mut state, "on_event", Value::Int(1)),
        val(&[("ok", Value::Bool(true))])
    );
    let (code, msg) = error_code(&call(&mut state, "no_such_hook", Value::Nil));
    assert_eq!(
        (code.as_str(), msg.as_str()),
        ("unhandled", "no handler for hook 'no_such_hook'")
    );
}

#[test]
fn tag_patterns_pick_the_handler() {
    let mut state = None;
    register(&mut state);
    let tag = |t: &str| val(&[("tag", s(t)), ("text", s("abc"))]);
    assert_eq!(
        call(&mut state, "on_tag", tag("upper")).get("value"),
        Some(&s("ABC"))
    );
    assert_eq!(
        call(&mut state, "on_tag", tag("redact.email")).get("value"),
        Some(&s("[redacted]"))
    );
    assert_eq!(
        error_code(&call(&mut state, "on_tag", tag("uppercase"))).0,
        "unhandled"
    );
    assert_eq!(
        error_code(&call(&mut state, "on_tag", Value::Nil)).0,
        "unhandled"
    );
}

#[test]
fn bad_requests_are_invalid() {
    let mut state = None;
    let no_hook = val(&[("data", Value::Nil)]).encode_to_vec().unwrap();
    let bad_hook = val(&[("hook", Value::Int(1))]).encode_to_vec().unwrap();
    let deep = {
        let mut v = vec![
            0x82, 0xa4, b'h', b'o', b'o', b'k', 0xa5, b'v', b'a', b'l', b'u', b'e', 0xa4, b'd',
            b'a', b't', b'a',
        ];
        v.extend(nested(64, &[0x91], &[0xc0])); // 65 with the request map
        v
    };
    for req in [
        vec![],
        vec![0xc0],
        vec![0x90],
        vec![0x80, 0xc0],
        no_hook,
        bad_hook,
        deep,
        vec![0xdf, 0xff, 0xff, 0xff, 0xff],
        vec![0x81, 0x01, 0x02],
    ] {
        let resp = call_raw(&mut state, &req);
        assert_eq!(error_code(&resp).0, "invalid", "{}", hex(&req));
    }
    // 63 nested containers in data (64 with the request map) are fine.
    let mut ok = vec![
        0x82, 0xa4, b'h', b'o', b'o', b'k', 0xa5, b'v', b'a', b'l', b'u', b'e', 0xa4, b'd', b'a',
        b't', b'a',
    ];
    ok.extend(nested(63, &[0x91], &[0xc0]));
    assert_eq!(
        call_raw(&mut state, &ok).get("ok"),
        Some(&Value::Bool(true))
    );
}

#[test]
fn data_str_and_meta() {
    #[derive(Default)]
    struct P;
    impl Plugin for P {
        const HOOKS: &'static [Hook<Self>] = &[Hook::new("h", Handler(Self::h))];
    }
    impl P {
        fn h(&mut self, call: &mut Call) -> wasmext::Result<Reply> {
            let name = call.data_str()?;
            let session = call
                .meta()
                .and_then(|m| m.find("session").ok().flatten())
                .and_then(|mut r| r.read_str().ok())
                .unwrap_or("none");
            call.reply_str(&format!("{}@{}", name, session))
        }
    }
    let mut state: Option<P> = None;
    let run = |state: &mut Option<P>, req: Value| {
        wasmext::__rt::call::<P>(&req.encode_to_vec().unwrap(), state, P::default);
        Value::decode(&wasmext::__rt::last_output()).unwrap()
    };
    let resp = run(
        &mut state,
        val(&[
            ("hook", s("h")),
            ("data", s("ada")),
            (
                "meta",
                val(&[("session", s("s1")), ("call", Value::Int(3))]),
            ),
        ]),
    );
    assert_eq!(resp.get("value"), Some(&s("ada@s1")));
    let resp = run(
        &mut state,
        val(&[("hook", s("h")), ("data", Value::Int(4))]),
    );
    let (code, msg) = error_code(&resp);
    assert_eq!(
        (code.as_str(), msg.as_str()),
        ("invalid", "data must be a string")
    );
    // No registration (and no name, version) still works; so does no data.
    let resp = run(&mut state, val(&[("hook", s("h"))]));
    assert_eq!(error_code(&resp).0, "invalid");
    let _ = msgpack::MAX_DEPTH;
}
