package windows

import (
	"strconv"
	"strings"

	"github.com/riskstream/riskstream/event"
	"github.com/riskstream/riskstream/rules"
)

// Fields lists the event attributes cfg uses and how, to build the decoder's
// schema: keys, filters and distinct fields are scalars, summed and measured
// fields numbers.
func Fields(cfg *rules.Config) []event.Field {
	var fields []event.Field
	scalars := func(names []string) {
		for _, n := range names {
			fields = append(fields, event.Field{Name: n, Use: event.UseScalar})
		}
	}
	where := func(fs []rules.Filter) {
		for _, f := range fs {
			scalars([]string{f.Field})
		}
	}
	for _, r := range cfg.Rules {
		where(r.Where)
		where(r.Match)
		scalars(r.Key)
		switch {
		case r.Aggregate.Kind.Numeric():
			fields = append(fields, event.Field{Name: r.Aggregate.Field, Use: event.UseNumber})
		case r.Aggregate.Kind == rules.Distinct:
			scalars([]string{r.Aggregate.Field})
		}
	}
	for _, h := range cfg.Heatmaps {
		where(h.Where)
		scalars(h.Key)
		fields = append(fields, event.Field{Name: h.Field, Use: event.UseNumber})
	}
	return fields
}

// KeyParts splits the key part of a slot key into the texts of its
// attributes, in the order of the rule's key.
func KeyParts(key string, fn func(i int, text string)) {
	for i := 0; len(key) > 0; i++ {
		j := strings.IndexByte(key, 0)
		if j < 0 {
			return
		}
		fn(i, key[:j])
		key = key[j+1:]
	}
}

// KeyText renders the key part of a slot key for people: its attributes'
// values, strings unquoted, separated by sep, each after its attribute's
// name and '=' when names (the rule's key) are given.
func KeyText(names []string, key, sep string) string {
	var b strings.Builder
	KeyParts(key, func(i int, text string) {
		if i > 0 {
			b.WriteString(sep)
		}
		if i < len(names) {
			b.WriteString(names[i])
			b.WriteByte('=')
		}
		if s, err := strconv.Unquote(text); err == nil {
			text = s
		}
		b.WriteString(text)
	})
	return b.String()
}
