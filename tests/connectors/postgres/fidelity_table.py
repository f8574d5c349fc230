"""A PostgreSQL table holding every built-in type with its edge values, and what each value must become: the ground
truth, written out by hand.

Each column lists the SQL literals the test inserts for rows 1 to 3 (row 4 is all NULL), what Arrow holds for them
in plain storage (temporal values as their stored integers; :func:`splitsource.sink._text.plain_storage`), and, where
it differs, what JSON lines holds. The text of the types read as the server's text is PostgreSQL's own output for
the literal, as its documentation gives it. Nothing here goes through splitsource's converters.
"""

from __future__ import annotations

import json
import math
from decimal import Decimal
from typing import Any

from tests.fixtures import PostgresServer

TABLE = "fidelity_all_types"
ROWS = 3  # rows 1..3 hold values, row 4 only NULLs
TEN_TO_999 = "1" + "0" * 999  # a 1,000-digit numeric
TEN_TO_MINUS_1000 = "0." + "0" * 999 + "1"
I64_MAX = 2**63 - 1
NAN, INF = math.nan, math.inf

# name, type, SQL literals (rows 1..3), Arrow plain values, JSON lines values (None: the same as the Arrow ones)
COLUMNS: list[tuple[str, str, list[str], list[Any], list[Any] | None]] = [
    ("i2", "int2", ["-32768", "32767", "0"], [-32768, 32767, 0], None),
    ("i4", "int4", ["-2147483648", "2147483647", "0"], [-(2**31), 2**31 - 1, 0], None),
    ("i8", "int8", ["-9223372036854775808", "9223372036854775807", "0"], [-(2**63), I64_MAX, 0], None),
    ("n", "numeric", ["('1' || repeat('0', 999))::numeric", "'NaN'", "'-Infinity'"],
     [TEN_TO_999, "NaN", "-Infinity"], None),
    ("n2", "numeric", ["'Infinity'", "'-0.000100'", "'1e-1000'"], ["Infinity", "-0.000100", TEN_TO_MINUS_1000], None),
    # numeric(p,s) is a decimal (Spark's JDBC source gives DecimalType(p,s)); JSON lines holds its text
    ("n3", "numeric(6,3)", ["123.45", "-999.999", "0"], [Decimal("123.450"), Decimal("-999.999"), Decimal("0.000")],
     ["123.450", "-999.999", "0.000"]),
    ("r", "real", ["'NaN'", "'Infinity'", "'-0'"], [NAN, INF, -0.0], ["NaN", "Infinity", -0.0]),
    ("f8", "float8", ["'-Infinity'", "'5e-324'", "0.1"], [-INF, 5e-324, 0.1], ["-Infinity", 5e-324, 0.1]),
    ("t", "text", ["E'ü日本 \"q\", \\n\\r\\t\\\\'", "''", "'x'"], ['ü日本 "q", \n\r\t\\', "", "x"], None),
    ("c", "char(5)", ["'ab'", "'abcde'", "''"], ["ab   ", "abcde", "     "], None),
    ("vc", "varchar(10)", ["'x,y'", "''", "'\u2028'"], ["x,y", "", "\u2028"], None),
    ("nm", "name", ["'nm'", "''", "'z'"], ["nm", "", "z"], None),
    ("by", "bytea", ["'\\x00ff'", "''", "'abc'"], [b"\x00\xff", b"", b"abc"], ["AP8=", "", "YWJj"]),
    ("b", "bool", ["true", "false", "false"], [True, False, False], None),
    ("u", "uuid", ["'6BA7B810-9DAD-11D1-80B4-00C04FD430C8'", "'00000000-0000-0000-0000-000000000000'",
                   "'{ffffffff-ffff-ffff-ffff-ffffffffffff}'"],
     ["6ba7b810-9dad-11d1-80b4-00c04fd430c8", "00000000-0000-0000-0000-000000000000",
      "ffffffff-ffff-ffff-ffff-ffffffffffff"], None),
    ("j", "json", ["'{\"b\": 1,  \"a\": [1, 2]}'", "'[]'", "'null'"], ['{"b": 1,  "a": [1, 2]}', "[]", "null"], None),
    ("jb", "jsonb", ["'{\"b\": 1, \"a\": [1,2], \"c\": {\"é\": null}}'", "'[]'", "'null'"],
     ['{"a": [1, 2], "b": 1, "c": {"é": null}}', "[]", "null"], None),
    ("d", "date", ["'4713-01-01 BC'", "'5874897-12-31'", "'2026-11-26'"], [-2_440_550, 2_145_042_905, 20_783],
     ["-4712-01-01", "+5874897-12-31", "2026-11-26"]),
    ("ts", "timestamp", ["'4713-01-01 00:00:00 BC'", "'294247-01-10 04:00:54.775807'", "'2026-01-01 12:34:56.789012'"],
     [-210_863_520_000_000_000, I64_MAX, 1_767_270_896_789_012],
     ["-4712-01-01T00:00:00.000000", "+294247-01-10T04:00:54.775807", "2026-01-01T12:34:56.789012"]),
    ("tstz", "timestamptz", ["'4713-01-01 00:00:00+00 BC'", "'294247-01-10 04:00:54.775807+00'",
                             "'2026-01-01 12:34:56.789012+05:30'"],
     [-210_863_520_000_000_000, I64_MAX, 1_767_251_096_789_012],
     ["-4712-01-01T00:00:00.000000Z", "+294247-01-10T04:00:54.775807Z", "2026-01-01T07:04:56.789012Z"]),
    ("tm", "time", ["'00:00'", "'23:59:59.999999'", "'12:34:56.000001'"], [0, 86_399_999_999, 45_296_000_001],
     ["00:00:00.000000", "23:59:59.999999", "12:34:56.000001"]),
    ("ttz", "timetz", ["'12:00:00+05:30'", "'00:00:00-15:59'", "'24:00:00+15:59'"],
     ["12:00:00+05:30", "00:00:00-15:59", "24:00:00+15:59"], None),
    ("iv", "interval", ["'1 year 2 mons 3 days 04:05:06.789'", "'-178000000 years'", "'0'"],
     ["1 year 2 mons 3 days 04:05:06.789", "-178000000 years", "00:00:00"], None),
    # money is a decimal of its locale's fractional digits (the tests' server: C, 2), JSON lines its text
    ("mo", "money", ["1234.56", "'-92233720368547758.08'", "0"],
     [Decimal("1234.56"), Decimal("-92233720368547758.08"), Decimal("0.00")],
     ["1234.56", "-92233720368547758.08", "0.00"]),
    # inet as psql, JDBC and ADBC show it: a host without its prefix length (text(inet), the cast, keeps it)
    ("ip", "inet", ["'192.168.0.1/24'", "'::1'", "'2001:db8::1/128'"], ["192.168.0.1/24", "::1", "2001:db8::1"],
     None),
    ("ci", "cidr", ["'10.0.0.0/8'", "'::/0'", "'2001:db8::/32'"], ["10.0.0.0/8", "::/0", "2001:db8::/32"], None),
    ("mac", "macaddr", ["'08:00:2B:01:02:03'", "'ffff.ffff.ffff'", "'000000000000'"],
     ["08:00:2b:01:02:03", "ff:ff:ff:ff:ff:ff", "00:00:00:00:00:00"], None),
    ("mac8", "macaddr8", ["'08:00:2b:01:02:03:04:05'", "'08:00:2b:01:02:03'", "'ff-ff-ff-ff-ff-ff-ff-ff'"],
     ["08:00:2b:01:02:03:04:05", "08:00:2b:ff:fe:01:02:03", "ff:ff:ff:ff:ff:ff:ff:ff"], None),
    ("bt", "bit(4)", ["B'1010'", "B'0000'", "B'1111'"], ["1010", "0000", "1111"], None),
    ("vb", "varbit", ["B'1'", "B''", "B'101010101'"], ["1", "", "101010101"], None),
    ("r4", "int4range", ["'[1,10)'", "'empty'", "'[-5,0]'"], ["[1,10)", "empty", "[-5,1)"], None),
    ("rts", "tstzrange", ["'[2026-01-01 00:00+00,2026-02-01 00:00+00)'", "'(,)'", "'[-infinity,infinity]'"],
     ['["2026-01-01 00:00:00+00","2026-02-01 00:00:00+00")', "(,)", "[-infinity,infinity]"], None),
    ("mr", "int4multirange", ["'{[1,3), [5,7)}'", "'{}'", "'{(,5), [7,)}'"], ["{[1,3),[5,7)}", "{}", "{(,5),[7,)}"],
     None),
    ("pt", "point", ["'(1.5,-2)'", "'(0,0)'", "'(1e300,-1e-300)'"], ["(1.5,-2)", "(0,0)", "(1e+300,-1e-300)"], None),
    ("ln", "line", ["'{1,-1,0}'", "'{0,1,0}'", "'[(0,0),(1,1)]'"], ["{1,-1,0}", "{0,1,0}", "{1,-1,0}"], None),
    ("ls", "lseg", ["'[(0,0),(1,1)]'", "'(0,0),(0,0)'", "'[(1e300,0),(0,0)]'"],
     ["[(0,0),(1,1)]", "[(0,0),(0,0)]", "[(1e+300,0),(0,0)]"], None),
    ("bx", "box", ["'(0,0),(1,1)'", "'(0,0),(0,0)'", "'((1,1),(1,1))'"], ["(1,1),(0,0)", "(0,0),(0,0)", "(1,1),(1,1)"],
     None),
    ("pa", "path", ["'[(0,0),(1,1),(2,0)]'", "'((0,0))'", "'(0,0),(1,1)'"],
     ["[(0,0),(1,1),(2,0)]", "((0,0))", "((0,0),(1,1))"], None),
    ("pg", "polygon", ["'((0,0),(1,1),(2,0))'", "'(0,0)'", "'((1,2),(3,4),(5,6))'"],
     ["((0,0),(1,1),(2,0))", "((0,0))", "((1,2),(3,4),(5,6))"], None),
    ("cr", "circle", ["'<(0,0),1.5>'", "'((0,0),0)'", "'1,1,1e300'"], ["<(0,0),1.5>", "<(0,0),0>", "<(1,1),1e+300>"],
     None),
    ("x", "xml", ["'<a>x &amp; y</a>'", "''", "'<?xml version=\"1.0\"?><r/>'"],
     ["<a>x &amp; y</a>", "", '<?xml version="1.0"?><r/>'], None),
    ("tv", "tsvector", ["'a fat cat'", "''", "$$'q':1A b:2$$"], ["'a' 'cat' 'fat'", "", "'b':2 'q':1A"], None),
    ("tq", "tsquery", ["'fat & cat'", "'x'", "'!x | y'"], ["'fat' & 'cat'", "'x'", "!'x' | 'y'"], None),
    # a one-dimensional array of a type read natively or as a decimal is a list (Spark's JDBC source: ArrayType);
    # one of more dimensions, or whose first index is not 1, is refused (BEYOND, test_postgres_fidelity.py)
    ("a1", "int4[]", ["'{1,NULL}'", "'{}'", "ARRAY[-2147483648, 2147483647]"], [[1, None], [], [-(2**31), 2**31 - 1]],
     None),
    ("a2", "text[]", ["'{\"a b\",NULL,\"\",null}'", "'{}'", "ARRAY['\"', ',', 'NULL']"],
     [["a b", None, "", None], [], ['"', ",", "NULL"]], None),
    ("a3", "numeric[]", ["'{NaN,1.50}'", "'{Infinity,-Infinity}'", "'{}'"],
     ["{NaN,1.50}", "{Infinity,-Infinity}", "{}"], None),
    ("cp", "fidelity_pair", ["ROW(1, 'x y')", "ROW(NULL, NULL)", "ROW(-1, '')"], ['(1,"x y")', "(,)", '(-1,"")'], None),
    ("dm", "fidelity_positive", ["1", "2147483647", "100"], [1, 2**31 - 1, 100], None),
    ("en", "fidelity_mood", ["'happy days'", "'sad'", "'ok'"], ["happy days", "sad", "ok"], None),
    ("o", "oid", ["4294967295", "0", "1"], ["4294967295", "0", "1"], None),
    # bytea in a composite is in the hex format whatever the server's bytea_output (the tests' server: escape)
    ("cby", "fidelity_blob", ["ROW(decode('00ff', 'hex'))", "ROW(''::bytea)", "ROW(NULL)"],
     ['("\\\\x00ff")', '("\\\\x")', "()"], None),
    ("ba", "bytea[]", ["ARRAY[decode('00ff', 'hex'), NULL]", "'{}'", "ARRAY[''::bytea]"],
     [[b"\x00\xff", None], [], [b""]], [["AP8=", None], [], [""]]),
    ("au", "uuid[]", ["ARRAY['A0EEBC99-9C0B-4EF8-BB6D-6BB9BD380A11'::uuid, NULL]", "'{}'", "'{}'"],
     [["a0eebc99-9c0b-4ef8-bb6d-6bb9bd380a11", None], [], []], None),
    ("aj", "jsonb[]", ["ARRAY['{\"b\": 1, \"a\": [2]}'::jsonb, 'null']", "'{}'", "ARRAY['[]'::jsonb]"],
     ['{"{\\"a\\": [2], \\"b\\": 1}","null"}', "{}", "{[]}"], None),
    ("atz", "timestamptz[]", ["ARRAY['2026-01-01 00:00:00+00'::timestamptz]", "'{}'",
                              "'{\"4713-01-01 00:00:00+00 BC\",NULL,\"294247-01-10 04:00:54.775807+00\"}'"],
     [[1_767_225_600_000_000], [], [-210_863_520_000_000_000, None, I64_MAX]],
     [["2026-01-01T00:00:00.000000Z"], [], ["-4712-01-01T00:00:00.000000Z", None, "+294247-01-10T04:00:54.775807Z"]]),
    ("adn", "numeric(6,2)[]", ["'{1.5,NULL}'", "'{}'", "'{-9999.99,0}'"],
     [[Decimal("1.50"), None], [], [Decimal("-9999.99"), Decimal("0.00")]], [["1.50", None], [], ["-9999.99", "0.00"]]),
    ("ad", "date[]", ["'{2026-11-26,NULL}'", "'{}'", "'{4713-01-01 BC}'"], [[20_783, None], [], [-2_440_550]],
     [["2026-11-26", None], [], ["-4712-01-01"]]),
    ("af", "float8[]", ["'{Infinity,-0.5,NULL}'", "'{}'", "'{5e-324}'"], [[INF, -0.5, None], [], [5e-324]],
     [["Infinity", -0.5, None], [], [5e-324]]),
    ("abo", "bool[]", ["'{t,NULL}'", "'{}'", "'{f}'"], [[True, None], [], [False]], None),
    ("acp", "fidelity_pair[]", ["ARRAY[ROW(1, 'x y')::fidelity_pair]", "'{}'", "ARRAY[ROW(NULL, NULL)::fidelity_pair]"],
     ['{"(1,\\"x y\\")"}', "{}", '{"(,)"}'], None),
    ("aen", "fidelity_mood[]", ["ARRAY['sad', 'happy days']::fidelity_mood[]", "'{}'", "'{ok}'"],
     ['{sad,"happy days"}', "{}", "{ok}"], None),
    ("nr", "numrange", ["'[1.5,2.5)'", "'empty'", "'(,0]'"], ["[1.5,2.5)", "empty", "(,0]"], None),
    ("dr", "daterange", ["'[2026-01-01,2026-02-01]'", "'empty'", "'[,2026-01-01)'"],
     ["[2026-01-01,2026-02-02)", "empty", "(,2026-01-01)"], None),
    ("tr", "tsrange", ["'(2026-01-01 00:00,)'", "'empty'", "'[2026-01-01 12:00,2026-01-02 00:00)'"],
     ['("2026-01-01 00:00:00",)', "empty", '["2026-01-01 12:00:00","2026-01-02 00:00:00")'], None),
    ("nmr", "nummultirange", ["'{[1.5,2.5), [3,4]}'", "'{}'", "'{(,0)}'"], ["{[1.5,2.5),[3,4]}", "{}", "{(,0)}"], None),
    ("dmr", "datemultirange", ["'{[2026-01-01,2026-01-03)}'", "'{}'", "'{[2026-01-01,2026-01-01]}'"],
     ["{[2026-01-01,2026-01-03)}", "{}", "{[2026-01-01,2026-01-02)}"], None),
    ("tmr", "tsmultirange", ["'{}'", "'{[2026-01-01 00:00,2026-01-01 00:01)}'", "'{(,)}'"],
     ["{}", '{["2026-01-01 00:00:00","2026-01-01 00:01:00")}', "{(,)}"], None),
    ("ncp", "fidelity_nested", ["ROW(ROW(1, 'a'), 2)", "ROW(NULL, NULL)", "ROW(ROW(NULL, 'b c'), -1)"],
     ['("(1,a)",2)', "(,)", '("(,""b c"")",-1)'], None),
    ("dt", "fidelity_label", ["'x'", "''", "'ü'"], ["x", "", "ü"], None),
    ("dn", "fidelity_amount", ["12.5", "-999999.99", "0"], [Decimal("12.50"), Decimal("-999999.99"), Decimal("0.00")],
     ["12.50", "-999999.99", "0.00"]),
    ("ch", '"char"', ["'a'", "'z'", "''"], ["a", "z", ""], None),
    ("lsn", "pg_lsn", ["'16/B374D848'", "'0/0'", "'FFFFFFFF/FFFFFFFF'"], ["16/B374D848", "0/0", "FFFFFFFF/FFFFFFFF"],
     None),
    ("x8", "xid8", ["'0'", "'18446744073709551615'", "'3'"], ["0", "18446744073709551615", "3"], None),
    ("rc", "regclass", ["'pg_class'", "'pg_catalog.pg_type'", "0"], ["pg_class", "pg_type", "-"], None),
    ("t3", "time(3)", ["'12:34:56.789123'", "'00:00:00.0005'", "'23:59:59.9994'"],
     [45_296_789_000, 1_000, 86_399_999_000], ["12:34:56.789000", "00:00:00.001000", "23:59:59.999000"]),
    ("ts0", "timestamp(0)", ["'2026-01-01 00:00:00.6'", "'1970-01-01 00:00:00'", "'2000-02-29 23:59:59.4'"],
     [1_767_225_601_000_000, 0, 951_868_799_000_000],
     ["2026-01-01T00:00:01.000000", "1970-01-01T00:00:00.000000", "2000-02-29T23:59:59.000000"]),
    # a negative scale rounds to tens, hundreds, ... (PostgreSQL 15 on): no decimal type holds it, so its text
    ("nng", "numeric(5,-2)", ["12345", "-99949", "0"], ["12300", "-99900", "0"], None),
]
# types Delta has no type for, read as text there
DELTA_TEXT = {"tm": ["00:00:00", "23:59:59.999999", "12:34:56.000001"],
              "t3": ["12:34:56.789", "00:00:00.001", "23:59:59.999"]}


def create(server: PostgresServer, without: frozenset[str] = frozenset()) -> None:
    """The table, its composite, domain and enum types, and its four rows (``without``: columns left out)."""
    columns = [c for c in COLUMNS if c[0] not in without]
    with server.connect() as conn:
        conn.execute(f"DROP TABLE IF EXISTS {TABLE}")
        conn.execute("DROP TYPE IF EXISTS fidelity_nested; DROP TYPE IF EXISTS fidelity_pair; "
                     "DROP TYPE IF EXISTS fidelity_mood; DROP TYPE IF EXISTS fidelity_blob; "
                     "DROP DOMAIN IF EXISTS fidelity_positive; "
                     "DROP DOMAIN IF EXISTS fidelity_label; DROP DOMAIN IF EXISTS fidelity_amount")
        conn.execute("CREATE TYPE fidelity_pair AS (a int, b text)")
        conn.execute("CREATE TYPE fidelity_nested AS (p fidelity_pair, n int)")
        conn.execute("CREATE TYPE fidelity_blob AS (b bytea)")
        conn.execute("CREATE DOMAIN fidelity_label AS text")
        conn.execute("CREATE DOMAIN fidelity_amount AS numeric(8,2)")
        conn.execute("CREATE TYPE fidelity_mood AS ENUM ('sad', 'ok', 'happy days')")
        conn.execute("CREATE DOMAIN fidelity_positive AS int CHECK (VALUE > 0)")
        conn.execute(f"CREATE TABLE {TABLE} (id int PRIMARY KEY, "
                     + ", ".join(f"{n} {t}" for n, t, _, _, _ in columns) + ")")
        for row in range(ROWS):
            conn.execute(f"INSERT INTO {TABLE} VALUES ({row + 1}, "
                         + ", ".join(literals[row] for _, _, literals, _, _ in columns) + ")")
        conn.execute(f"INSERT INTO {TABLE} (id) VALUES ({ROWS + 1})")


def expected_plain(text: dict[str, list[Any]] | None = None,
                   without: frozenset[str] = frozenset()) -> dict[int, dict[str, Any]]:
    """Each row as Arrow holds it in plain storage, by id (``text``: columns read as text instead, their values;
    ``without``: columns left out)."""
    columns = [c for c in COLUMNS if c[0] not in without]
    rows = {}
    for row in range(ROWS):
        values = {n: (text or {}).get(n, plain)[row] for n, _, _, plain, _ in columns}
        rows[row + 1] = {"id": row + 1, **values}
    rows[ROWS + 1] = {"id": ROWS + 1, **{n: None for n, _, _, _, _ in columns}}
    return rows


def expected_json() -> dict[int, dict[str, Any]]:
    """Each row as JSON lines holds it, by id."""
    rows = {}
    for row in range(ROWS):
        rows[row + 1] = {"id": row + 1, **{n: (json or plain)[row] for n, _, _, plain, json in COLUMNS}}
    rows[ROWS + 1] = {"id": ROWS + 1, **{n: None for n, _, _, _, _ in COLUMNS}}
    return rows


def csv_text(value: Any) -> str:
    """A JSON lines value as a CSV field holds it (null and the empty string both read back as '')."""
    if value is None:
        return ""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, list):  # a list is its JSON text
        return json.dumps(value, separators=(",", ":"), ensure_ascii=False)
    return value if isinstance(value, str) else repr(value)


def same(got: Any, want: Any) -> bool:
    """Equal, with NaN equal to NaN and -0.0 told from 0.0."""
    if isinstance(want, float) and isinstance(got, float):
        both_nan = math.isnan(got) and math.isnan(want)
        return both_nan or (got == want and math.copysign(1, got) == math.copysign(1, want))
    return type(got) is type(want) and got == want

