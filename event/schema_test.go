package event

import (
	"fmt"
	"reflect"
	"strings"
	"testing"
)

func TestNewSchema(t *testing.T) {
	tests := map[string]struct {
		fields []Field
		want   []Field
		err    string
	}{
		"empty": {fields: nil, want: nil},
		"order kept": {
			fields: []Field{{Name: "b"}, {Name: "a", Use: UseNumber}, {Name: "source"}},
			want:   []Field{{Name: "b"}, {Name: "a", Use: UseNumber}, {Name: "source"}},
		},
		"duplicates merged, number wins": {
			fields: []Field{{Name: "a"}, {Name: "b", Use: UseNumber}, {Name: "a", Use: UseNumber}, {Name: "b"}, {Name: "a"}},
			want:   []Field{{Name: "a", Use: UseNumber}, {Name: "b", Use: UseNumber}},
		},
		"id reserved":        {fields: []Field{{Name: "id"}}, err: `event: field "id" is reserved`},
		"ts reserved":        {fields: []Field{{Name: "a"}, {Name: "ts", Use: UseNumber}}, err: `event: field "ts" is reserved`},
		"ingest_ts reserved": {fields: []Field{{Name: "ingest_ts"}}, err: `event: field "ingest_ts" is reserved`},
		"empty name":         {fields: []Field{{Name: ""}}, err: `event: empty field name`},
		"invalid UTF-8":      {fields: []Field{{Name: "a\xff"}}, err: `event: field name "a\xff" is not valid UTF-8`},
		"unknown use":        {fields: []Field{{Name: "a", Use: 7}}, err: `event: field "a" has unknown use 7`},
	}
	for name, tt := range tests {
		t.Run(name, func(t *testing.T) {
			s, err := NewSchema(tt.fields)
			if tt.err != "" {
				if err == nil || err.Error() != tt.err {
					t.Fatalf("NewSchema error = %v, want %s", err, tt.err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if got := s.Fields(); !reflect.DeepEqual(got, tt.want) {
				t.Errorf("Fields() = %v, want %v", got, tt.want)
			}
			if s.Len() != len(tt.want) {
				t.Errorf("Len() = %d, want %d", s.Len(), len(tt.want))
			}
			for i, f := range tt.want {
				if j, ok := s.Index(f.Name); !ok || j != i {
					t.Errorf("Index(%q) = %d, %v, want %d", f.Name, j, ok, i)
				}
			}
			for _, name := range []string{"id", "ts", "ingest_ts", "zzz", ""} {
				if j, ok := s.Index(name); ok {
					t.Errorf("Index(%q) = %d, want not found", name, j)
				}
			}
		})
	}
}

func TestFieldsIsACopy(t *testing.T) {
	s, err := NewSchema([]Field{{Name: "a"}})
	if err != nil {
		t.Fatal(err)
	}
	s.Fields()[0].Name = "b"
	if got := s.Fields()[0].Name; got != "a" {
		t.Errorf("changing Fields() changed the schema: %q", got)
	}
}

// TestManyFields checks lookup with enough names that hash collisions and
// long probe sequences occur, including names that share their first eight
// bytes and length and differ only after them.
func TestManyFields(t *testing.T) {
	var fields []Field
	for i := range 300 {
		fields = append(fields, Field{Name: fmt.Sprintf("f%d", i)}, Field{Name: fmt.Sprintf("prefix__%03d", i)})
	}
	s, err := NewSchema(fields)
	if err != nil {
		t.Fatal(err)
	}
	var rec strings.Builder
	rec.WriteString(`{"id":"a","ts":1`)
	for i, f := range fields {
		if i%3 != 0 {
			fmt.Fprintf(&rec, `,"%s":%d`, f.Name, i)
		}
		fmt.Fprintf(&rec, `,"%sx":"no","x%s":"no"`, f.Name, f.Name)
	}
	rec.WriteString("}")

	var ev Event
	if err := NewDecoder(s).Decode([]byte(rec.String()), &ev); err != nil {
		t.Fatal(err)
	}
	for i, f := range fields {
		j, ok := s.Index(f.Name)
		if !ok || j != i {
			t.Fatalf("Index(%q) = %d, %v, want %d", f.Name, j, ok, i)
		}
		v := ev.Attrs[i]
		if i%3 == 0 {
			if v.Kind != Missing {
				t.Errorf("%s = %s, want missing", f.Name, v.Text)
			}
		} else if v.Kind != Number || v.Num != float64(i) {
			t.Errorf("%s = %d %s, want %d", f.Name, v.Kind, v.Text, i)
		}
	}
}
