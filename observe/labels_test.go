package observe

import "testing"

func TestBoundedLabels(t *testing.T) {
	b := newBoundedLabels(2)
	for _, c := range []struct{ in, want string }{
		{"a", "a"}, {"other", "other"}, {"b", "b"}, {"c", "other"}, {"a", "a"}, {"b", "b"}, {"d", "other"},
	} {
		if got := b.value(c.in); got != c.want {
			t.Errorf("value(%q) = %q, want %q", c.in, got, c.want)
		}
	}
}
