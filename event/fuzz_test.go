package event

import (
	"bytes"
	"encoding/json"
	"errors"
	"math"
	"strconv"
	"strings"
	"testing"
	"time"
	"unicode/utf8"
)

// fuzzFields covers every kind of schema entry: scalars, numbers, source as
// an attribute, a name longer than a word, names that are not ASCII, one
// that needs escaping, and U+FFFD, which invalid UTF-8 in a key becomes.
var fuzzFields = []Field{
	{Name: "user"},
	{Name: "a"},
	{Name: "amount", Use: UseNumber},
	{Name: "n", Use: UseNumber},
	{Name: "source"},
	{Name: "long_field_name", Use: UseNumber},
	{Name: "é"},
	{Name: `k"\`},
	{Name: "\uFFFD"},
}

var fuzzSeeds = []string{
	`{"id":"r-000001","ts":1732150000123,"ingest_ts":1732150000131,"source":"gw-3","user":"u42","device":"d9","api":"/pay","amount":99.0,"n":12.5,"status":200}`,
	`{"id":"a","ts":"2024-11-21T01:26:40.123+08:00","user":true,"a":false,"amount":-0,"n":1e-3}`,
	`{"id":"a","ts":"2024-11-21T1:26:40,5Z"}`,
	`{"id":"a","ts":-9007199254740992,"ingest_ts":null,"source":null,"user":null}`,
	`{"id":"a","ts":9007199254740993}`,
	`{"id":"\u0061\ud83d\ude00","ts":1,"\u0075ser":"\"\\\/\b\f\n\r\t\u0001","\u00e9":"\ud800","k\"\\":"x"}`,
	"{\"id\":\"\xff\",\"ts\":1,\"\xfe\":\"\xc3\",\"source\":\"\xe2\x82\"}",
	`{"x":{"a":[1,{"b":[]},"s\"]",true,false,null,-0.5e-7,{}]},"id":"a","y":[[[]]],"ts":1}`,
	`{"id":"a","ts":1,"id":"b","ts":2,"user":{},"user":"u"}`,
	`{"id":"a","ts":1,"amount":1e400,"long_field_name":123456789012345678901234567890}`,
	`{"id":"a","ts":1,"n":0.1,"amount":9007199254740993,"long_field_name":1.7976931348623157e308}`,
	`{"id":"","ts":1}`,
	`{"id":"a","ts":1.5}`,
	`{"id":"a","ts":"x"}`,
	`{"id":"a","ts":1,"source":3}`,
	`{"id":"a","ts":1,"amount":"3"}`,
	`{"id":"a","ts":1,"user":[]}`,
	` {"id":"a","ts":1} `,
	`{"id":"a","ts":1}x`,
	`{"id":"a","ts":01}`,
	`{"id":"a\u12","ts":1}`,
	`{"id":"a","ts":1,"x":[1,]}`,
	`{"id":"a","ts":1,"x":{"y":1]}`,
	`{"id":"a","ts":tru}`,
	"{\"id\":\"a\nb\",\"ts\":1}",
	`[{"id":"a","ts":1}]`,
	`"x"`,
	``,
	`{`,
	`{}`,
	`{"a":` + strings.Repeat("[", 100) + strings.Repeat("]", 100) + `}`,
}

// FuzzDecode checks Decode against encoding/json: it must accept the syntax
// of exactly the records json.Valid accepts (whose top level is an object),
// and on those agree with what json.Unmarshal into a map finds, field by
// field.
func FuzzDecode(f *testing.F) {
	for _, s := range fuzzSeeds {
		f.Add([]byte(s))
	}
	schema, err := NewSchema(fuzzFields)
	if err != nil {
		f.Fatal(err)
	}
	// One Decoder and Event for all inputs, so that state left over from
	// one record would show in the next.
	d := NewDecoder(schema)
	var ev Event
	f.Fuzz(func(t *testing.T, record []byte) {
		err := d.Decode(record, &ev)
		var reason string
		if err != nil {
			var e *Error
			if !errors.As(err, &e) {
				t.Fatalf("error %v (%T) is not an *Error", err, err)
			}
			reason = e.Reason
		}
		syntaxReason := reason == "empty record" || reason == "not a JSON object" || strings.HasPrefix(reason, "invalid JSON: ")
		trimmed := bytes.TrimLeft(record, " \t\r\n")
		switch {
		case !json.Valid(record):
			if !syntaxReason || reason == "not a JSON object" {
				t.Fatalf("json.Valid rejects %q, Decode says %q", record, reason)
			}
			return
		case trimmed[0] != '{':
			if reason != "not a JSON object" {
				t.Fatalf("%q is valid JSON but no object, Decode says %q", record, reason)
			}
			return
		case syntaxReason:
			t.Fatalf("json.Valid accepts %q, Decode says %q", record, reason)
		}

		want, wantErr := model(t, record, schema)
		if wantErr != "" {
			if !strings.Contains(reason, strconv.Quote(wantErr)) {
				t.Fatalf("Decode(%q) = %q, want an error about field %q", record, reason, wantErr)
			}
			return
		}
		if err != nil {
			t.Fatalf("Decode(%q): %v", record, err)
		}
		if got := dump(&ev); got != dump(want) {
			t.Fatalf("Decode(%q)\n got %s\nwant %s", record, got, dump(want))
		}
	})
}

// model decodes a record the slow, obvious way, through encoding/json, and
// returns the Event Decode should produce or why it should fail.
func model(t *testing.T, record []byte, s *Schema) (*Event, string) {
	dec := json.NewDecoder(bytes.NewReader(record))
	dec.UseNumber()
	var m map[string]any
	if err := dec.Decode(&m); err != nil {
		t.Fatalf("json.Valid accepts %q, but json cannot decode it: %v", record, err)
	}
	ev := &Event{Attrs: make([]Value, s.Len())}

	id, ok := m["id"].(string)
	if !ok || id == "" {
		return nil, "id"
	}
	ev.ID = AppendString(nil, []byte(id))

	switch ts := m["ts"].(type) {
	case json.Number:
		ms, ok := modelMillis(ts)
		if !ok {
			return nil, "ts"
		}
		ev.TS = ms
	case string:
		tm, err := time.Parse(time.RFC3339Nano, ts)
		if err != nil || tm.UnixMilli() < MinTS || tm.UnixMilli() > MaxTS {
			return nil, "ts"
		}
		ev.TS = tm.UnixMilli()
	default:
		return nil, "ts"
	}

	if v, ok := m["ingest_ts"]; ok && v != nil {
		n, _ := v.(json.Number)
		ms, ok := modelMillis(n)
		if !ok {
			return nil, "ingest_ts"
		}
		ev.IngestTS, ev.HasIngestTS = ms, true
	}

	if v, ok := m["source"]; ok && v != nil {
		src, ok := v.(string)
		if !ok {
			return nil, "source"
		}
		ev.Source = []byte(src)
	}

	for i, f := range s.Fields() {
		switch v := m[f.Name].(type) {
		case nil:
		case string:
			if f.Use == UseNumber {
				return nil, f.Name
			}
			ev.Attrs[i] = Value{Kind: String, Text: AppendString(nil, []byte(v))}
		case json.Number:
			num, err := strconv.ParseFloat(string(v), 64)
			if err != nil {
				return nil, f.Name
			}
			ev.Attrs[i] = Value{Kind: Number, Text: []byte(v), Num: num}
		case bool:
			if f.Use == UseNumber {
				return nil, f.Name
			}
			ev.Attrs[i] = Value{Kind: Bool, Text: []byte(strconv.FormatBool(v))}
		default:
			return nil, f.Name
		}
	}
	return ev, ""
}

// modelMillis is the rule for integer timestamps: an integer literal (no
// fraction, no exponent) in [MinTS, MaxTS].
func modelMillis(n json.Number) (int64, bool) {
	if strings.ContainsAny(string(n), ".eE") {
		return 0, false
	}
	ms, err := strconv.ParseInt(string(n), 10, 64)
	return ms, err == nil && MinTS <= ms && ms <= MaxTS
}

// dump renders every field of an event, numbers by their bits, so that two
// events compare as strings.
func dump(ev *Event) string {
	var b strings.Builder
	b.WriteString("id=" + strconv.Quote(string(ev.ID)) + " ts=" + strconv.FormatInt(ev.TS, 10))
	if ev.HasIngestTS {
		b.WriteString(" ingest=" + strconv.FormatInt(ev.IngestTS, 10))
	}
	b.WriteString(" source=" + strconv.Quote(string(ev.Source)))
	for _, v := range ev.Attrs {
		b.WriteString(" " + strconv.Itoa(int(v.Kind)) + ":" + strconv.Quote(string(v.Text)))
		if v.Kind == Number {
			b.WriteString("~" + strconv.FormatUint(math.Float64bits(v.Num), 16))
		}
	}
	return b.String()
}

// FuzzAppendString checks that AppendString is JSON that decodes to what
// encoding/json makes of the same bytes, and is canonical: decoding and
// encoding it again gives it back.
func FuzzAppendString(f *testing.F) {
	for _, s := range []string{"", "plain", `"\`, "\x00\x1f\n\t\b\f\r\x7f", "é😀", "\xff\xc3", "\xed\xa0\x80", "\u2028<>&"} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, s []byte) {
		got := AppendString([]byte("prefix"), s)
		if !bytes.HasPrefix(got, []byte("prefix")) {
			t.Fatalf("AppendString dropped dst: %q", got)
		}
		got = got[len("prefix"):]
		var back, want string
		if err := json.Unmarshal(got, &back); err != nil {
			t.Fatalf("AppendString(%q) = %s, not a JSON string: %v", s, got, err)
		}
		enc, _ := json.Marshal(string(s))
		if err := json.Unmarshal(enc, &want); err != nil {
			t.Fatal(err)
		}
		if back != want {
			t.Fatalf("AppendString(%q) = %s decodes to %q, want %q", s, got, back, want)
		}
		if again := AppendString(nil, []byte(back)); !bytes.Equal(again, got) {
			t.Fatalf("AppendString is not canonical: %s, then %s", got, again)
		}
		if !utf8.Valid(got) {
			t.Fatalf("AppendString(%q) = %q, invalid UTF-8", s, got)
		}
	})
}

// FuzzParseTime checks the allocation-free RFC 3339 parser against
// time.Parse, which it replaces only where it agrees.
func FuzzParseTime(f *testing.F) {
	for _, s := range []string{
		"2024-11-21T01:26:40Z", "2024-11-21T01:26:40.123456789+08:00", "0000-01-01T00:00:00Z",
		"9999-12-31T23:59:59.999999999999-23:59", "2024-02-29T00:00:00Z", "2023-02-29T00:00:00Z",
		"2024-11-21T24:00:00Z", "2024-11-21T1:26:40Z", "2024-11-21T01:26:40,5Z", "2024-11-21t01:26:40z",
		"1969-12-31T23:59:59.9999Z", "2024-11-21T01:26:40.Z", "2024-11-21T01:26:40+0800",
	} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		tm, err := time.Parse(time.RFC3339Nano, s)
		ms, ok := ParseTimeMillis([]byte(s))
		if ok != (err == nil) || ok && ms != tm.UnixMilli() {
			t.Fatalf("parseTimeMillis(%q) = %d, %v; time.Parse gives %d, %v", s, ms, ok, tm.UnixMilli(), err)
		}
		if fast, ok := parseRFC3339([]byte(s)); ok && (err != nil || fast != tm.UnixMilli()) {
			t.Fatalf("parseRFC3339(%q) = %d; time.Parse gives %d, %v", s, fast, tm.UnixMilli(), err)
		}
	})
}

// FuzzParseNumber checks the fast number conversion against
// strconv.ParseFloat on whatever the scanner accepts as a number.
func FuzzParseNumber(f *testing.F) {
	for _, s := range []string{
		"0", "-0", "12.5", "99.0", "0.1", "1732150000123", "9007199254740993", "-9007199254740992.5",
		"123456789012345678901", "0.000000000000000000000001", "1e22", "1.5e-3", "1e400", "-1e-400",
		"4.9e-324", "1.7976931348623157e308", "3.14159265358979323846", "0.3",
	} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		if s == "" || !(s[0] == '-' || isDigit(s[0])) {
			return
		}
		if end, _, err := scanNumber([]byte(s), 0); err != nil || end != len(s) {
			return
		}
		want, err := strconv.ParseFloat(s, 64)
		got, ok := parseNumber([]byte(s))
		if ok != (err == nil) || ok && math.Float64bits(got) != math.Float64bits(want) {
			t.Fatalf("parseNumber(%q) = %v, %v; strconv gives %v, %v", s, got, ok, want, err)
		}
	})
}
