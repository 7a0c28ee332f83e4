package rules

import (
	"regexp"
	"strings"
	"testing"
)

const baseRules = `
watermark: {out_of_orderness: 2s}
rules:
  - name: pay-burst
    where: {api: [/pay, /refund], status: 200}
    key: [user]
    window: {type: sliding, size: 60s, slide: 1s}
    aggregate: count
    threshold: 5
    action: deny
heatmaps:
  - {name: lat, key: api, field: latency_ms, window: {type: tumbling, size: 10s}, buckets: [1, 10]}
`

func fingerprint(t *testing.T, text string) string {
	t.Helper()
	cfg, err := Parse("fp.yaml", []byte(text))
	if err != nil {
		t.Fatalf("Parse:\n%s\n%v", text, err)
	}
	return cfg.Fingerprint()
}

func TestFingerprint(t *testing.T) {
	base := fingerprint(t, baseRules)
	if !regexp.MustCompile(`^[0-9a-f]{64}$`).MatchString(base) {
		t.Fatalf("Fingerprint() = %q, want 64 hex digits", base)
	}
	same := map[string]string{
		"comments and layout": `
# the same rules, written differently
watermark:
  out_of_orderness: 2000ms
rules:
  - name: pay-burst
    action: deny
    threshold: 5
    aggregate: count
    window: {slide: 1s, type: sliding, size: 1m}
    key: user
    where:
      status: 2e2
      api: [/refund, /pay]
heatmaps:
  - name: lat
    key: [api]
    field: latency_ms
    window: {type: tumbling, size: 10s}
    buckets: [1.0, 10]
`,
		"threshold and action": `
watermark: {out_of_orderness: 2s}
rules:
  - name: pay-burst
    where: {api: [/pay, /refund], status: 200}
    key: [user]
    window: {type: sliding, size: 60s, slide: 1s}
    aggregate: count
    threshold: 50
    action: review
heatmaps:
  - {name: lat, key: api, field: latency_ms, window: {type: tumbling, size: 10s}, buckets: [1, 10]}
`,
		"skew settings": baseRules + "skew: {threshold: 30ms, scope: job}\n",
	}
	for name, text := range same {
		if got := fingerprint(t, text); got != base {
			t.Errorf("%s: fingerprint changed", name)
		}
	}
	differs := map[string]string{
		"window":           replace(t, baseRules, "slide: 1s", "slide: 2s"),
		"key":              replace(t, baseRules, "key: [user]", "key: [user, device]"),
		"filter":           replace(t, baseRules, "status: 200", "status: 201"),
		"filter type":      replace(t, baseRules, "status: 200", `status: "200"`),
		"aggregate":        replace(t, baseRules, "aggregate: count", "aggregate: distinct:device"),
		"rule name":        replace(t, baseRules, "name: pay-burst", "name: pay-burst-2"),
		"buckets":          replace(t, baseRules, "buckets: [1, 10]", "buckets: [1, 20]"),
		"heatmap field":    replace(t, baseRules, "field: latency_ms", "field: db_ms"),
		"out_of_orderness": replace(t, baseRules, "out_of_orderness: 2s", "out_of_orderness: 3s"),
		"allowed_lateness": replace(t, baseRules, "2s}", "2s, allowed_lateness: 1s}"),
		"idle_timeout":     replace(t, baseRules, "2s}", "2s, idle_timeout: 1s}"),
		"another heatmap":  baseRules + "  - {name: lat2, key: api, field: latency_ms, window: {type: tumbling, size: 10s}, buckets: [1, 10]}\n",
	}
	for name, text := range differs {
		if got := fingerprint(t, text); got == base {
			t.Errorf("%s: fingerprint did not change", name)
		}
	}
}

// replace edits the one occurrence of old in s.
func replace(t *testing.T, s, old, new string) string {
	t.Helper()
	if strings.Count(s, old) != 1 {
		t.Fatalf("%q is not in the base rules exactly once", old)
	}
	return strings.Replace(s, old, new, 1)
}
