use super::*;

fn parse(body: &str) -> Result<DocumentRecord, Rejection> {
    validate(
        RawRecord::decode(body.as_bytes())?,
        &DocumentConfig::builder("t").build().expect("valid"),
    )
}

fn code(body: &str) -> String {
    parse(body).map_or_else(|r| r.code.to_string(), |_| "ok".into())
}

/// Bodies (`KEY` stands for a valid key) and the code each gets.
const CASES: &[(&str, &str)] = &[
    (
        r#"{"op":"list_append",KEY,"path":"l","values":[1,"a",{"x":null}]}"#,
        "ok",
    ),
    (
        r#"{"op":"list_remove",KEY,"path":"a.b[2]","value":{"m":1}}"#,
        "ok",
    ),
    (r#"{"op":"set_add",KEY,"path":"s","values":[]}"#, "ok"),
    (
        r#"{"op":"replace",KEY,"document":{"PK":"u","x":1},"expectedVersion":0}"#,
        "ok",
    ),
    ("{oops", "bad_json"),
    ("[]", "not_an_object"),
    (
        r#"{"op":"set_add","path":"s","values":["a"]}"#,
        "invalid_key",
    ),
    (r#"{"op":"pop",KEY,"path":"l"}"#, "unknown_op"),
    (r#"{"op":"set_add",KEY,"values":["a"]}"#, "invalid_path"),
    (
        r#"{"op":"set_add",KEY,"path":"a..b","values":["a"]}"#,
        "invalid_path",
    ),
    (
        r#"{"op":"set_add",KEY,"path":"SK","values":["a"]}"#,
        "key_path",
    ),
    (
        r#"{"op":"list_remove",KEY,"path":"doc_version","value":1}"#,
        "reserved_path",
    ),
    (
        r#"{"op":"list_append",KEY,"path":"doc_op1[0]","values":[1]}"#,
        "reserved_path",
    ),
    (
        r#"{"op":"set_add",KEY,"path":"s","values":["a",1]}"#,
        "invalid_values",
    ),
    (
        r#"{"op":"set_add",KEY,"path":"s","values":[true]}"#,
        "invalid_values",
    ),
    (r#"{"op":"set_remove",KEY,"path":"s"}"#, "invalid_values"),
    (r#"{"op":"list_remove",KEY,"path":"l"}"#, "invalid_values"),
    (
        r#"{"op":"list_append",KEY,"path":"l","values":[1],"unique":"y"}"#,
        "invalid_values",
    ),
    (r#"{"op":"replace",KEY,"document":[1]}"#, "invalid_document"),
    (
        r#"{"op":"replace",KEY,"document":{},"expectedVersion":-1}"#,
        "invalid_version",
    ),
    (
        r#"{"op":"replace",KEY,"document":{"doc_version":9}}"#,
        "reserved_attribute",
    ),
    (
        r#"{"op":"replace",KEY,"document":{"PK":"other"}}"#,
        "key_mismatch",
    ),
];

#[test]
fn each_malformed_kind_has_its_code() {
    for (body, expected) in CASES {
        let body = body.replace("KEY", r#""key":{"PK":"u","SK":"d"}"#);
        assert_eq!(code(&body), *expected, "{body}");
    }
}

#[test]
fn replace_keeps_the_key_in_the_document() {
    let r = parse(r#"{"op":"replace","key":{"PK":"u"},"document":{"name":"Ann"}}"#).expect("valid");
    let DocumentOp::Replace {
        document,
        expected_version,
    } = r.op
    else {
        panic!("replace expected");
    };
    assert_eq!(expected_version, None);
    assert_eq!(document["PK"], AttributeValue::S("u".into()));
    assert_eq!(document["name"], AttributeValue::S("Ann".into()));
}
