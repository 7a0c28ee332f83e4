package event

import (
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"testing"
)

// testFields is the schema of the table tests: scalars, numbers, a source
// that is also an attribute, and names that need escaping or are not ASCII.
var testFields = []Field{
	{Name: "user"},
	{Name: "api"},
	{Name: "amount", Use: UseNumber},
	{Name: "latency_ms", Use: UseNumber},
	{Name: "source"},
	{Name: `q"uote`},
	{Name: "ключ"},
}

func testDecoder(t *testing.T) *Decoder {
	t.Helper()
	s, err := NewSchema(testFields)
	if err != nil {
		t.Fatal(err)
	}
	return NewDecoder(s)
}

// show renders an event compactly, so that a table states what it expects in
// one string: the attributes appear in schema order as name=value, where a
// value is its Text (with Num after a '~' for numbers) and missing ones are
// left out.
func show(ev *Event, s *Schema) string {
	var b strings.Builder
	fmt.Fprintf(&b, "id=%s ts=%d", ev.ID, ev.TS)
	if ev.HasIngestTS {
		fmt.Fprintf(&b, " ingest=%d", ev.IngestTS)
	}
	if ev.Source != nil {
		fmt.Fprintf(&b, " source=%q", ev.Source)
	}
	for i, f := range s.Fields() {
		v := ev.Attrs[i]
		switch v.Kind {
		case Missing:
			continue
		case Number:
			fmt.Fprintf(&b, " %s=%s~%v", f.Name, v.Text, v.Num)
		case String, Bool:
			fmt.Fprintf(&b, " %s=%s", f.Name, v.Text)
		}
	}
	return b.String()
}

func TestDecodeValid(t *testing.T) {
	tests := map[string]struct {
		record string
		want   string
	}{
		"spec example": {
			record: `{"id":"r-000001","ts":1732150000123,"source":"gw-3","user":"u42","device":"d9",
 "api":"/pay","channel":"alipay","merchant":"m7","region":"cn-east",
 "latency_ms":12.5,"status":200,"amount":99.0}`,
			want: `id="r-000001" ts=1732150000123 source="gw-3" user="u42" api="/pay" amount=99.0~99 latency_ms=12.5~12.5 source="gw-3"`,
		},
		"minimal":               {`{"id":"a","ts":0}`, `id="a" ts=0`},
		"whitespace everywhere": {" \t\r\n{ \"id\" : \"a\" ,\n\"ts\"\t:\r5 } \n", `id="a" ts=5`},
		"negative ts":           {`{"id":"a","ts":-1732150000123}`, `id="a" ts=-1732150000123`},
		"minus zero ts":         {`{"id":"a","ts":-0}`, `id="a" ts=0`},
		"ts at MaxTS":           {`{"id":"a","ts":9007199254740992}`, `id="a" ts=9007199254740992`},
		"ts at MinTS":           {`{"id":"a","ts":-9007199254740992}`, `id="a" ts=-9007199254740992`},
		"rfc3339 utc": {
			`{"id":"a","ts":"2024-11-21T01:26:40Z"}`, `id="a" ts=1732152400000`,
		},
		"rfc3339 fraction truncated to ms": {
			`{"id":"a","ts":"2024-11-21T01:26:40.123987654Z"}`, `id="a" ts=1732152400123`,
		},
		"rfc3339 short fraction": {
			`{"id":"a","ts":"2024-11-21T01:26:40.5Z"}`, `id="a" ts=1732152400500`,
		},
		"rfc3339 positive offset": {
			`{"id":"a","ts":"2024-11-21T09:26:40.25+08:00"}`, `id="a" ts=1732152400250`,
		},
		"rfc3339 negative offset": {
			`{"id":"a","ts":"2024-11-20T20:56:40-04:30"}`, `id="a" ts=1732152400000`,
		},
		"rfc3339 before the epoch truncates down": {
			`{"id":"a","ts":"1969-12-31T23:59:59.9995Z"}`, `id="a" ts=-1`,
		},
		"rfc3339 leap day": {
			`{"id":"a","ts":"2024-02-29T00:00:00Z"}`, `id="a" ts=1709164800000`,
		},
		"rfc3339 one-digit hour, as time.Parse allows": {
			`{"id":"a","ts":"2024-11-21T1:26:40Z"}`, `id="a" ts=1732152400000`,
		},
		"rfc3339 with escapes": {
			`{"id":"a","ts":"2024-11-21T01:26:40\u005a"}`, `id="a" ts=1732152400000`,
		},
		"ingest_ts": {
			`{"id":"a","ts":1,"ingest_ts":-2}`, `id="a" ts=1 ingest=-2`,
		},
		"ingest_ts null is absent": {
			`{"id":"a","ts":1,"ingest_ts":null}`, `id="a" ts=1`,
		},
		"source null is absent": {
			`{"id":"a","ts":1,"source":null}`, `id="a" ts=1`,
		},
		"empty source": {
			`{"id":"a","ts":1,"source":""}`, `id="a" ts=1 source="" source=""`,
		},
		"source unescaped, attribute canonical": {
			`{"id":"a","ts":1,"source":"g\u0077-\"3\"\/"}`, `id="a" ts=1 source="gw-\"3\"/" source="gw-\"3\"/"`,
		},
		"scalar kinds": {
			`{"id":"a","ts":1,"user":42,"api":true,"source":"s","q\"uote":false,"ключ":-1.5e3}`,
			`id="a" ts=1 source="s" user=42~42 api=true source="s" q"uote=false ключ=-1.5e3~-1500`,
		},
		"nulls are missing": {
			`{"id":"a","ts":1,"user":null,"amount":null}`, `id="a" ts=1`,
		},
		"numbers keep their text": {
			`{"id":"a","ts":1,"amount":1.0,"latency_ms":1E+2}`, `id="a" ts=1 amount=1.0~1 latency_ms=1E+2~100`,
		},
		"number underflows to zero": {
			`{"id":"a","ts":1,"amount":1e-400}`, `id="a" ts=1 amount=1e-400~0`,
		},
		"duplicate keys: last wins": {
			`{"id":"a","ts":true,"user":{"x":1},"id":"b","ts":2,"user":"u","user":null,"api":"x","api":"y"}`,
			`id="b" ts=2 api="y"`,
		},
		"escaped keys match unescaped names": {
			`{"\u0069d":"a","t\u0073":1,"\u0075ser":"u","q\"uote":"q","\u043a\u043b\u044e\u0447":"k"}`,
			`id="a" ts=1 user="u" q"uote="q" ключ="k"`,
		},
		"keys differing in case or escapes do not match": {
			`{"id":"a","ts":1,"User":"u","user ":"v","us\u0000er":"w"}`, `id="a" ts=1`,
		},
		"escapes in values are canonicalized": {
			`{"id":"\u0061\/b","ts":1,"user":"\"\\\/\b\f\n\r\t\u0001\u001f\u007f\u00e9\ud83d\ude00"}`,
			`id="a/b" ts=1 user="\"\\/\b\f\n\r\t\u0001\u001f` + "\x7fé😀" + `"`,
		},
		"lone surrogates become U+FFFD": {
			`{"id":"a","ts":1,"user":"\ud800x\udc00\ud800\ud800\ude00"}`,
			`id="a" ts=1 user="` + "\uFFFDx\uFFFD\uFFFD\U00010200" + `"`,
		},
		"invalid UTF-8 becomes U+FFFD": {
			"{\"id\":\"a\xff\",\"ts\":1,\"user\":\"\xc3\",\"source\":\"s\xe2\x82\"}",
			"id=\"a\uFFFD\" ts=1 source=\"s\uFFFD\uFFFD\" user=\"\uFFFD\" source=\"s\uFFFD\uFFFD\"",
		},
		"valid UTF-8 as written": {
			`{"id":"日本","ts":1,"user":"ユーザー"}`, `id="日本" ts=1 user="ユーザー"`,
		},
		"unknown fields of any type are skipped": {
			`{"x":{"a":[1,{"b":[]},"s\"]",true,false,null,-0.5e-7,{}]},"id":"a","y":[[[]]],"ts":1,"z":"\ud800"}`,
			`id="a" ts=1`,
		},
		"empty object and array values": {`{"o":{},"a":[],"id":"a","ts":1}`, `id="a" ts=1`},
	}
	for name, tt := range tests {
		t.Run(name, func(t *testing.T) {
			d := testDecoder(t)
			var ev Event
			if err := d.Decode([]byte(tt.record), &ev); err != nil {
				t.Fatalf("Decode(%s): %v", tt.record, err)
			}
			if got := show(&ev, d.schema); got != tt.want {
				t.Errorf("Decode(%s)\n got %s\nwant %s", tt.record, got, tt.want)
			}
		})
	}
}

func TestDecodeInvalid(t *testing.T) {
	deep := func(n int) string {
		return `{"id":"a","ts":1,"x":` + strings.Repeat("[", n-1) + strings.Repeat("]", n-1) + "}"
	}
	tests := map[string]struct {
		record string
		want   string
	}{
		"empty":                  {``, `empty record`},
		"only whitespace":        {" \n\t", `empty record`},
		"array":                  {`[1,2]`, `not a JSON object`},
		"string":                 {` "x" `, `not a JSON object`},
		"number":                 {`12`, `not a JSON object`},
		"null":                   {`null`, `not a JSON object`},
		"broken array":           {`[1,2`, `invalid JSON: unexpected end of input at byte 4`},
		"garbage":                {`hello`, `invalid JSON: unexpected 'h' at byte 0`},
		"binary":                 {"\x00{}", `invalid JSON: unexpected byte 0x00 at byte 0`},
		"unexpected brace":       {`{"id":"a","ts":1,}`, `invalid JSON: unexpected '}' at byte 17`},
		"missing colon":          {`{"id" "a"}`, `invalid JSON: unexpected '"' at byte 6`},
		"missing comma":          {`{"id":"a" "ts":1}`, `invalid JSON: unexpected '"' at byte 10`},
		"unquoted key":           {`{id:"a"}`, `invalid JSON: unexpected 'i' at byte 1`},
		"single quotes":          {`{'id':'a'}`, `invalid JSON: unexpected ''' at byte 1`},
		"unterminated object":    {`{"id":"a","ts":1`, `invalid JSON: unexpected end of input at byte 16`},
		"unterminated string":    {`{"id":"a","ts":"2024`, `invalid JSON: unterminated string at byte 15`},
		"unterminated key":       {`{"id`, `invalid JSON: unterminated string at byte 1`},
		"unterminated escape":    {`{"id":"a\`, `invalid JSON: unterminated string at byte 6`},
		"unterminated \\u":       {`{"id":"\u12`, `invalid JSON: unterminated string at byte 6`},
		"bad escape":             {`{"id":"a\x"}`, `invalid JSON: invalid escape '\x' at byte 8`},
		"bad \\u escape":         {`{"id":"\u12g4"}`, `invalid JSON: invalid \u escape at byte 7`},
		"raw newline in string":  {"{\"id\":\"a\nb\"}", `invalid JSON: control character 0x0a in string at byte 8`},
		"raw tab in a long key":  {"{\"abcdefghij\tk\":1}", `invalid JSON: control character 0x09 in string at byte 12`},
		"trailing garbage":       {`{"id":"a","ts":1} x`, `invalid JSON: unexpected 'x' after the object at byte 18`},
		"two objects":            {`{"id":"a","ts":1}{}`, `invalid JSON: unexpected '{' after the object at byte 17`},
		"leading zero":           {`{"id":"a","ts":01}`, `invalid JSON: unexpected '1' at byte 16`},
		"plus sign":              {`{"id":"a","ts":+1}`, `invalid JSON: unexpected '+' at byte 15`},
		"bare minus":             {`{"id":"a","ts":-}`, `invalid JSON: unexpected '}' in number at byte 16`},
		"dot without digits":     {`{"id":"a","ts":1.}`, `invalid JSON: unexpected '}' in number at byte 17`},
		"leading dot":            {`{"id":"a","ts":.5}`, `invalid JSON: unexpected '.' at byte 15`},
		"exponent without digit": {`{"id":"a","ts":1e+}`, `invalid JSON: unexpected '}' in number at byte 18`},
		"number at end":          {`{"id":"a","ts":1e`, `invalid JSON: unexpected end of input in number at byte 17`},
		"bad literal":            {`{"id":"a","ts":1,"x":tru}`, `invalid JSON: unexpected '}' at byte 24`},
		"capital literal":        {`{"id":"a","ts":1,"x":True}`, `invalid JSON: unexpected 'T' at byte 21`},
		"NaN":                    {`{"id":"a","ts":NaN}`, `invalid JSON: unexpected 'N' at byte 15`},
		"nested unclosed":        {`{"id":"a","ts":1,"x":[{"y":[1,2}]}`, `invalid JSON: unexpected '}' at byte 31`},
		"nested mismatched":      {`{"id":"a","ts":1,"x":{"y":1]}`, `invalid JSON: unexpected ']' at byte 27`},
		"nested trailing comma":  {`{"id":"a","ts":1,"x":[1,]}`, `invalid JSON: unexpected ']' at byte 24`},
		"nested bad key":         {`{"id":"a","ts":1,"x":{1:2}}`, `invalid JSON: unexpected '1' at byte 22`},
		"syntax beats semantics": {`{"ts":true,"x":[}`, `invalid JSON: unexpected '}' at byte 16`},
		"too deep":               {deep(10001), `invalid JSON: nesting deeper than 10000 levels at byte 10020`},
		"far too deep":           {`{"x":` + strings.Repeat("[", 1<<20), `invalid JSON: nesting deeper than 10000 levels at byte 10004`},
		"deep top-level array":   {strings.Repeat("[", 10001), `invalid JSON: nesting deeper than 10000 levels at byte 10000`},

		"missing id":          {`{"ts":1}`, `missing required field "id"`},
		"missing ts":          {`{"id":"a"}`, `missing required field "ts"`},
		"empty id":            {`{"id":"","ts":1}`, `field "id": want a non-empty string, got ""`},
		"numeric id":          {`{"id":7,"ts":1}`, `field "id": want a non-empty string, got 7`},
		"null id":             {`{"id":null,"ts":1}`, `field "id": want a non-empty string, got null`},
		"object id":           {`{"id":{},"ts":1}`, `field "id": want a non-empty string, got an object`},
		"ts true":             {`{"id":"a","ts":true}`, `field "ts": want integer epoch milliseconds or an RFC 3339 string, got true`},
		"ts null":             {`{"id":"a","ts":null}`, `field "ts": want integer epoch milliseconds or an RFC 3339 string, got null`},
		"ts array":            {`{"id":"a","ts":[1]}`, `field "ts": want integer epoch milliseconds or an RFC 3339 string, got an array`},
		"ts fraction":         {`{"id":"a","ts":1.5}`, `field "ts": want integer epoch milliseconds or an RFC 3339 string, got 1.5`},
		"ts exponent":         {`{"id":"a","ts":1e3}`, `field "ts": want integer epoch milliseconds or an RFC 3339 string, got 1e3`},
		"ts bad string":       {`{"id":"a","ts":"yesterday"}`, `field "ts": want integer epoch milliseconds or an RFC 3339 string, got "yesterday"`},
		"ts date only":        {`{"id":"a","ts":"2024-11-21"}`, `field "ts": want integer epoch milliseconds or an RFC 3339 string, got "2024-11-21"`},
		"ts no zone":          {`{"id":"a","ts":"2024-11-21T01:26:40"}`, `field "ts": want integer epoch milliseconds or an RFC 3339 string, got "2024-11-21T01:26:40"`},
		"ts february 30":      {`{"id":"a","ts":"2024-02-30T00:00:00Z"}`, `field "ts": want integer epoch milliseconds or an RFC 3339 string, got "2024-02-30T00:00:00Z"`},
		"ts numeric string":   {`{"id":"a","ts":"1732150000123"}`, `field "ts": want integer epoch milliseconds or an RFC 3339 string, got "1732150000123"`},
		"ts too big":          {`{"id":"a","ts":99999999999999999999}`, `field "ts": 99999999999999999999 is out of range`},
		"ts just above max":   {`{"id":"a","ts":9007199254740993}`, `field "ts": 9007199254740993 is out of range`},
		"ts just below min":   {`{"id":"a","ts":-9007199254740993}`, `field "ts": -9007199254740993 is out of range`},
		"ts long text cut":    {`{"id":"a","ts":"` + strings.Repeat("é", 30) + `"}`, `field "ts": want integer epoch milliseconds or an RFC 3339 string, got "` + strings.Repeat("é", 20) + `..."`},
		"ingest_ts string":    {`{"id":"a","ts":1,"ingest_ts":"2024-11-21T01:26:40Z"}`, `field "ingest_ts": want integer epoch milliseconds, got "2024-11-21T01:26:40Z"`},
		"ingest_ts fraction":  {`{"id":"a","ts":1,"ingest_ts":1.5}`, `field "ingest_ts": want integer epoch milliseconds, got 1.5`},
		"ingest_ts too big":   {`{"id":"a","ts":1,"ingest_ts":-99999999999999999999}`, `field "ingest_ts": -99999999999999999999 is out of range`},
		"source number":       {`{"id":"a","ts":1,"source":3}`, `field "source": want a string, got 3`},
		"source object":       {`{"id":"a","ts":1,"source":{"a":1}}`, `field "source": want a string, got an object`},
		"scalar object":       {`{"id":"a","ts":1,"user":{"id":1}}`, `field "user": want a string, number or boolean, got an object`},
		"scalar array":        {`{"id":"a","ts":1,"api":[]}`, `field "api": want a string, number or boolean, got an array`},
		"number string":       {`{"id":"a","ts":1,"latency_ms":"12"}`, `field "latency_ms": want a number, got a string`},
		"number bool":         {`{"id":"a","ts":1,"amount":false}`, `field "amount": want a number, got a boolean`},
		"number object":       {`{"id":"a","ts":1,"amount":{}}`, `field "amount": want a number, got an object`},
		"number too big":      {`{"id":"a","ts":1,"amount":1e400}`, `field "amount": 1e400 is out of range`},
		"scalar too big":      {`{"id":"a","ts":1,"user":-1e400}`, `field "user": -1e400 is out of range`},
		"escaped name in err": {`{"id":"a","ts":1,"q\"uote":[]}`, `field "q\"uote": want a string, number or boolean, got an array`},
	}
	for name, tt := range tests {
		t.Run(name, func(t *testing.T) {
			d := testDecoder(t)
			var ev Event
			err := d.Decode([]byte(tt.record), &ev)
			var e *Error
			if !errors.As(err, &e) {
				t.Fatalf("Decode(%.60s) = %v, want *Error %q", tt.record, err, tt.want)
			}
			if e.Reason != tt.want {
				t.Errorf("Decode(%.60s)\n got %s\nwant %s", tt.record, e.Reason, tt.want)
			}
		})
	}
}

// TestDepthLimitMatchesEncodingJSON checks both sides of the nesting limit
// against json.Valid, which the limit is chosen to agree with.
func TestDepthLimitMatchesEncodingJSON(t *testing.T) {
	d := testDecoder(t)
	var ev Event
	for _, depth := range []int{maxDepth - 1, maxDepth, maxDepth + 1} {
		// The top-level object is one level, so depth-1 arrays.
		rec := []byte(`{"id":"a","ts":1,"x":` + strings.Repeat("[", depth-1) + strings.Repeat("]", depth-1) + "}")
		err := d.Decode(rec, &ev)
		if valid := json.Valid(rec); valid != (err == nil) {
			t.Errorf("depth %d: json.Valid = %v, Decode error = %v", depth, valid, err)
		}
	}
}

// TestDecoderReuse checks that nothing of a record leaks into the next one
// decoded with the same Decoder and Event.
func TestDecoderReuse(t *testing.T) {
	d := testDecoder(t)
	var ev Event
	full := `{"id":"\u0061","ts":1,"ingest_ts":2,"source":"s\n","user":"\u0075","amount":3}`
	bare := `{"id":"b","ts":4}`
	for _, rec := range []string{full, bare, `{"id":1}`, full, `[`, bare} {
		err := d.Decode([]byte(rec), &ev)
		if rec == bare {
			if err != nil {
				t.Fatal(err)
			}
			if got, want := show(&ev, d.schema), `id="b" ts=4`; got != want {
				t.Errorf("after other records, got %s, want %s", got, want)
			}
		}
	}
}

// TestSlowPathTextsSurviveScratchGrowth decodes a record whose non-canonical
// strings make the scratch buffer grow several times, and checks every
// string handed out: growing moves the buffer while earlier strings of the
// record still point into it.
func TestSlowPathTextsSurviveScratchGrowth(t *testing.T) {
	d := testDecoder(t)
	values := map[string]string{}
	var rec strings.Builder
	rec.WriteString(`{"ts":1`)
	for i, name := range []string{"id", "source", "user", "api", `q"uote`, "ключ"} {
		// \u00e9 and a newline need the slow path; the lengths double so
		// that each string outgrows what the previous ones left.
		v := strings.Repeat("é\n"+strconv.Itoa(i), 50<<i)
		values[name] = v
		enc, err := json.Marshal(v)
		if err != nil {
			t.Fatal(err)
		}
		key, _ := json.Marshal(name)
		fmt.Fprintf(&rec, `,%s:%s`, key, strings.ReplaceAll(string(enc), "é", `\u00e9`))
	}
	rec.WriteString("}")

	var ev Event
	for round := range 2 { // the second time, scratch is already big
		if err := d.Decode([]byte(rec.String()), &ev); err != nil {
			t.Fatal(err)
		}
		if moved := &ev.ID[0] != &d.scratch[0]; moved != (round == 0) {
			t.Fatalf("round %d: scratch moved after the id was written: %v", round, moved)
		}
		if want := AppendString(nil, []byte(values["id"])); string(ev.ID) != string(want) {
			t.Errorf("ID = %.40s..., want %.40s...", ev.ID, want)
		}
		if string(ev.Source) != values["source"] {
			t.Errorf("Source = %.40q..., want %.40q...", ev.Source, values["source"])
		}
		for i, f := range d.schema.Fields() {
			if f.Use == UseNumber {
				continue
			}
			want := AppendString(nil, []byte(values[f.Name]))
			if v := ev.Attrs[i]; v.Kind != String || string(v.Text) != string(want) {
				t.Errorf("%s = %d %.40s..., want %.40s...", f.Name, v.Kind, v.Text, want)
			}
		}
	}
}

// TestTextsAreCapped checks that appending to a slice from an Event cannot
// overwrite the record or another value.
func TestTextsAreCapped(t *testing.T) {
	d := testDecoder(t)
	rec := []byte(`{"id":"a","ts":1,"user":"u\n","api":"p","amount":1,"source":"s"}`)
	var ev Event
	if err := d.Decode(rec, &ev); err != nil {
		t.Fatal(err)
	}
	for _, s := range [][]byte{ev.ID, ev.Source, ev.Attrs[0].Text, ev.Attrs[1].Text, ev.Attrs[2].Text} {
		if len(s) != cap(s) {
			t.Errorf("%q has spare capacity %d", s, cap(s)-len(s))
		}
	}
}

// TestRetain: after Retain, the next Decode must not overwrite the strings
// of the previous event, even those that live in scratch space.
func TestRetain(t *testing.T) {
	s, err := NewSchema([]Field{{Name: "user", Use: UseScalar}})
	if err != nil {
		t.Fatal(err)
	}
	d := NewDecoder(s)
	var a, b Event
	if err := d.Decode([]byte(`{"id":"a\u0041","ts":1,"user":"x\ty"}`), &a); err != nil {
		t.Fatal(err)
	}
	d.Retain()
	if err := d.Decode([]byte(`{"id":"b\u0042","ts":2,"user":"p\tq"}`), &b); err != nil {
		t.Fatal(err)
	}
	if string(a.ID) != `"aA"` || string(a.Attrs[0].Text) != `"x\ty"` {
		t.Fatalf("first event overwritten: id %s user %s", a.ID, a.Attrs[0].Text)
	}
	if string(b.ID) != `"bB"` || string(b.Attrs[0].Text) != `"p\tq"` {
		t.Fatalf("second event wrong: id %s user %s", b.ID, b.Attrs[0].Text)
	}
}
