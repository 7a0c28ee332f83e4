package deploy

import (
	"bufio"
	"encoding/json"
	"fmt"
	"os"
	"path"
	"path/filepath"
	"regexp"
	"slices"
	"sort"
	"strconv"
	"strings"
	"testing"

	"go.yaml.in/yaml/v4"
)

// root is the repository root: tests run in deploy/.
const root = ".."

// Types of metric families, as Prometheus exposes them.
const (
	counter   = "counter"
	gauge     = "gauge"
	histogram = "histogram"
)

// metricTypes are the metric families the job exposes (docs/metrics.md) and
// their types; a dashboard expression naming anything else is a typo.
// TestMetricTypesDefined checks that the code defines each.
var metricTypes = map[string]string{
	"riskstream_events_total":                      counter,
	"riskstream_last_checkpoint_timestamp_seconds": gauge,
	"riskstream_shadow_decisions_total":            counter,
	"riskstream_decisions_total":                   counter,
	"riskstream_request_latency_seconds":           histogram,
	"riskstream_heatmap_window_latency_seconds":    gauge,
	"riskstream_watermark_lag_seconds":             gauge,
	"riskstream_source_skew_seconds":               gauge,
	"riskstream_source_degraded":                   gauge,
	"riskstream_event_decision_latency_seconds":    histogram,
	"riskstream_consumer_lag":                      gauge,
	"riskstream_checkpoint_duration_seconds":       histogram,
	"riskstream_state_bytes":                       gauge,
	"riskstream_build_info":                        gauge,
	"riskstream_watermark_seconds":                 gauge,
	"riskstream_source_transitions_total":          counter,
	"riskstream_skew_sources_forgotten_total":      counter,
	"riskstream_output_truncated_total":            counter,
	"riskstream_output_refused_total":              counter,
	"riskstream_output_dropped_total":              counter,
	"riskstream_state_write_errors_total":          counter,
	"riskstream_partition_wait_timeouts_total":     counter,
}

// series is one series name a query can select: a family, or a
// histogram's _bucket, _sum or _count.
type series struct {
	family, typ string
	// suffix is "_bucket", "_sum" or "_count" for a histogram's series.
	suffix string
}

// lookupSeries resolves a selected name to its family.
func lookupSeries(name string) (series, bool) {
	if typ, ok := metricTypes[name]; ok {
		return series{family: name, typ: typ}, typ != histogram
	}
	for _, suffix := range []string{"_bucket", "_sum", "_count"} {
		if family, ok := strings.CutSuffix(name, suffix); ok && metricTypes[family] == histogram {
			return series{family: family, typ: histogram, suffix: suffix}, true
		}
	}
	return series{}, false
}

// counting reports whether the series only goes up, so that only its
// rate or increase means anything.
func (s series) counting() bool { return s.typ == counter || s.typ == histogram }

// metricsShown must each appear on the dashboard: one panel per metric
// (docs/metrics.md describes them).
var metricsShown = []string{
	"riskstream_events_total",
	"riskstream_decisions_total",
	"riskstream_request_latency_seconds_bucket",
	"riskstream_heatmap_window_latency_seconds",
	"riskstream_watermark_lag_seconds",
	"riskstream_source_skew_seconds",
	"riskstream_source_degraded",
	"riskstream_event_decision_latency_seconds_bucket",
	"riskstream_consumer_lag",
	"riskstream_checkpoint_duration_seconds_bucket",
	"riskstream_state_bytes",
	"riskstream_partition_wait_timeouts_total",
}

// TestMetricTypesDefined: every family the dashboard may use is defined in
// the code (a string literal in a Go file that is not a test), so that a
// renamed or removed metric does not linger here.
func TestMetricTypesDefined(t *testing.T) {
	var code strings.Builder
	err := filepath.WalkDir(root, func(p string, d os.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() && strings.HasPrefix(d.Name(), ".") && p != root {
			return filepath.SkipDir
		}
		if d.IsDir() || !strings.HasSuffix(p, ".go") || strings.HasSuffix(p, "_test.go") {
			return nil
		}
		b, err := os.ReadFile(p)
		code.Write(b)
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	for name := range metricTypes {
		if !strings.Contains(code.String(), `"`+name+`"`) {
			t.Errorf("no Go file defines the metric %s", name)
		}
	}
}

// --- docker-compose.yml ---------------------------------------------------

type composeFile struct {
	Services map[string]composeService `yaml:"services"`
	Volumes  map[string]any            `yaml:"volumes"`
}

type composeService struct {
	Image       string         `yaml:"image"`
	Build       any            `yaml:"build"`
	Entrypoint  any            `yaml:"entrypoint"`
	Command     any            `yaml:"command"`
	Environment map[string]any `yaml:"environment"`
	Ports       []any          `yaml:"ports"`
	Volumes     []any          `yaml:"volumes"`
	DependsOn   any            `yaml:"depends_on"`
	Healthcheck map[string]any `yaml:"healthcheck"`
	Profiles    []string       `yaml:"profiles"`
	MemLimit    any            `yaml:"mem_limit"`
	Deploy      struct {
		Resources struct {
			Limits struct {
				Memory any `yaml:"memory"`
			} `yaml:"limits"`
		} `yaml:"resources"`
	} `yaml:"deploy"`
}

// words flattens a compose command or entrypoint (string or list) into
// whitespace-separated words.
func words(v any) []string {
	switch v := v.(type) {
	case nil:
		return nil
	case string:
		return strings.Fields(v)
	case []any:
		var out []string
		for _, e := range v {
			out = append(out, strings.Fields(fmt.Sprint(e))...)
		}
		return out
	}
	return strings.Fields(fmt.Sprint(v))
}

// flagValue returns the value of --name in args (either "--name v" or
// "--name=v").
func flagValue(args []string, name string) (string, bool) {
	for i, a := range args {
		if a == name && i+1 < len(args) {
			return args[i+1], true
		}
		if v, ok := strings.CutPrefix(a, name+"="); ok {
			return v, true
		}
	}
	return "", false
}

// dependsOn maps each dependency to its condition ("" for the short list
// syntax).
func dependsOn(v any) map[string]string {
	out := map[string]string{}
	switch v := v.(type) {
	case []any:
		for _, e := range v {
			out[fmt.Sprint(e)] = ""
		}
	case map[string]any:
		for k, e := range v {
			c := ""
			if m, ok := e.(map[string]any); ok {
				c, _ = m["condition"].(string)
			}
			out[k] = c
		}
	}
	return out
}

// publishedPorts returns the host ports a service publishes, from the short
// ("[ip:]host:container[/proto]") or long syntax.
func publishedPorts(s composeService) []string {
	var out []string
	for _, p := range s.Ports {
		switch p := p.(type) {
		case map[string]any:
			if v, ok := p["published"]; ok {
				out = append(out, fmt.Sprint(v))
			}
		default:
			spec, _, _ := strings.Cut(fmt.Sprint(p), "/")
			parts := strings.Split(spec, ":")
			if len(parts) >= 2 {
				out = append(out, parts[len(parts)-2])
			}
		}
	}
	return out
}

// mount is one entry of a service's volumes.
type mount struct{ source, target string }

func mounts(s composeService) []mount {
	var out []mount
	for _, v := range s.Volumes {
		switch v := v.(type) {
		case string:
			parts := strings.Split(v, ":")
			if len(parts) >= 2 {
				out = append(out, mount{parts[0], parts[1]})
			}
		case map[string]any:
			src, _ := v["source"].(string)
			dst, _ := v["target"].(string)
			out = append(out, mount{src, dst})
		}
	}
	return out
}

// composeBytes parses a compose byte value: a number with an optional unit
// b, k, m or g (powers of 1024, as docker counts them; kb, mb, gb too).
func composeBytes(v string) (int64, error) {
	v = strings.ToLower(strings.TrimSpace(v))
	units := []struct {
		suffix string
		mul    int64
	}{{"gb", 1 << 30}, {"mb", 1 << 20}, {"kb", 1 << 10}, {"g", 1 << 30}, {"m", 1 << 20}, {"k", 1 << 10}, {"b", 1}}
	mul := int64(1)
	for _, u := range units {
		if num, ok := strings.CutSuffix(v, u.suffix); ok {
			v, mul = num, u.mul
			break
		}
	}
	f, err := strconv.ParseFloat(v, 64)
	if err != nil || f <= 0 {
		return 0, fmt.Errorf("memory %q: want a positive size such as 1280M", v)
	}
	return int64(f * float64(mul)), nil
}

// goMemLimitBytes parses GOMEMLIMIT as the Go runtime does: a number with
// an optional unit B, KiB, MiB, GiB or TiB.
func goMemLimitBytes(v string) (int64, error) {
	mul := int64(1)
	for i, u := range []string{"KiB", "MiB", "GiB", "TiB"} {
		if num, ok := strings.CutSuffix(v, u); ok {
			v, mul = num, int64(1)<<(10*(i+1))
			break
		}
	}
	v = strings.TrimSuffix(v, "B")
	n, err := strconv.ParseInt(v, 10, 64)
	if err != nil || n <= 0 {
		return 0, fmt.Errorf("%q: want a size such as 1GiB", v)
	}
	return n * mul, nil
}

func loadCompose(t *testing.T) composeFile {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(root, "docker-compose.yml"))
	if err != nil {
		t.Fatal(err)
	}
	var c composeFile
	if err := yaml.Unmarshal(b, &c); err != nil {
		t.Fatalf("docker-compose.yml: %v", err)
	}
	return c
}

func TestCompose(t *testing.T) {
	c := loadCompose(t)
	for _, name := range []string{"kafka", "topics", "riskstream", "prometheus", "grafana"} {
		if _, ok := c.Services[name]; !ok {
			t.Fatalf("docker-compose.yml: no service %q", name)
		}
	}
	svc := func(name string) composeService { return c.Services[name] }

	tests := []struct {
		name  string
		check func(t *testing.T)
	}{
		{"kafka is the official image in KRaft mode with a healthcheck", func(t *testing.T) {
			k := svc("kafka")
			if !strings.HasPrefix(k.Image, "apache/kafka:") {
				t.Errorf("kafka image %q, want apache/kafka:TAG", k.Image)
			}
			env := func(key string) string { return fmt.Sprint(k.Environment[key]) }
			if r := env("KAFKA_PROCESS_ROLES"); !strings.Contains(r, "broker") || !strings.Contains(r, "controller") {
				t.Errorf("KAFKA_PROCESS_ROLES = %q, want broker,controller (KRaft single node)", r)
			}
			if !strings.Contains(env("KAFKA_CONTROLLER_QUORUM_VOTERS"), "@kafka:") {
				t.Errorf("KAFKA_CONTROLLER_QUORUM_VOTERS = %q", env("KAFKA_CONTROLLER_QUORUM_VOTERS"))
			}
			if !strings.Contains(env("KAFKA_ADVERTISED_LISTENERS"), "://kafka:9092") {
				t.Errorf("KAFKA_ADVERTISED_LISTENERS = %q, want a listener on kafka:9092", env("KAFKA_ADVERTISED_LISTENERS"))
			}
			if len(words(k.Healthcheck["test"])) == 0 {
				t.Error("kafka has no healthcheck")
			}
		}},
		{"topics creates requests with LogAppendTime and the output topics", func(t *testing.T) {
			s := svc("topics")
			if s.Image != svc("kafka").Image {
				t.Errorf("topics image %q, want the kafka image %q (for kafka-topics.sh)", s.Image, svc("kafka").Image)
			}
			if dependsOn(s.DependsOn)["kafka"] != "service_healthy" {
				t.Error("topics must depend on kafka with condition service_healthy")
			}
			script := strings.Join(append(words(s.Entrypoint), words(s.Command)...), " ")
			if !strings.Contains(script, "kafka-topics") || !strings.Contains(script, "--create") {
				t.Errorf("topics does not run kafka-topics.sh --create: %q", script)
			}
			if !strings.Contains(script, "--bootstrap-server kafka:9092") {
				t.Error("topics does not use --bootstrap-server kafka:9092")
			}
			var requests string
			for _, line := range strings.Split(fmt.Sprint(s.Command), "\n") {
				if slices.Contains(strings.Fields(line), "requests") && strings.Contains(line, "--create") {
					requests = line
				}
			}
			for _, want := range []string{"--partitions 6", "message.timestamp.type=LogAppendTime"} {
				if !strings.Contains(requests, want) {
					t.Errorf("the command creating requests (%q) lacks %q", requests, want)
				}
			}
			ws := words(s.Command)
			for _, topic := range []string{"decisions", "heatmaps", "late", "dlq"} {
				if !slices.ContainsFunc(ws, func(w string) bool { return strings.Trim(w, `"';`) == topic }) {
					t.Errorf("topics does not create %q", topic)
				}
			}
		}},
		{"riskstream runs the live job against kafka:9092", func(t *testing.T) {
			s := svc("riskstream")
			if s.Build == nil {
				t.Error("riskstream is not built from the Dockerfile")
			}
			args := words(s.Command)
			if len(args) == 0 || args[0] != "run" {
				t.Fatalf("riskstream command %q, want run ...", args)
			}
			for flag, want := range map[string]string{
				"--brokers":      "kafka:9092",
				"--metrics-addr": ":9464",
				"--rules":        "/etc/riskstream/rules.yaml",
			} {
				if got, ok := flagValue(args, flag); !ok || got != want {
					t.Errorf("riskstream %s = %q, want %q", flag, got, want)
				}
			}
			dir, ok := flagValue(args, "--state-dir")
			if !ok || dir == "" {
				t.Fatal("riskstream has no --state-dir")
			}
			if !slices.ContainsFunc(mounts(s), func(m mount) bool { return m.target == dir }) {
				t.Errorf("no volume mounted on the state dir %s", dir)
			}
			if dependsOn(s.DependsOn)["topics"] != "service_completed_successfully" {
				t.Error("riskstream must depend on topics with condition service_completed_successfully")
			}
		}},
		{"riskstream publishes 9464 and has a healthcheck on /healthz", func(t *testing.T) {
			s := svc("riskstream")
			addr, _ := flagValue(words(s.Command), "--metrics-addr")
			_, port, _ := strings.Cut(addr, ":")
			if !slices.Contains(publishedPorts(s), port) {
				t.Errorf("riskstream serves metrics on %q but publishes %v", addr, publishedPorts(s))
			}
			test := words(s.Healthcheck["test"])
			if len(test) < 2 || test[0] != "CMD" {
				// CMD-SHELL needs a shell, which the runtime image lacks.
				t.Fatalf("riskstream healthcheck %q, want the exec form [CMD, ...]", test)
			}
			if path.Base(test[1]) != "riskstream" || !slices.Contains(test, "healthcheck") {
				t.Fatalf("riskstream healthcheck runs %q, want riskstream healthcheck (no curl or wget in the image)", test)
			}
			if url, _ := flagValue(test, "--url"); !strings.HasSuffix(url, ":"+port+"/healthz") {
				t.Errorf("healthcheck asks %q, want /healthz on port %s", url, port)
			}
		}},
		{"GOMEMLIMIT is below the container's memory limit", func(t *testing.T) {
			s := svc("riskstream")
			limit := s.Deploy.Resources.Limits.Memory
			if limit == nil {
				limit = s.MemLimit
			}
			if limit == nil {
				t.Fatal("riskstream has no memory limit (deploy.resources.limits.memory)")
			}
			max, err := composeBytes(fmt.Sprint(limit))
			if err != nil {
				t.Fatal(err)
			}
			soft, err := goMemLimitBytes(fmt.Sprint(s.Environment["GOMEMLIMIT"]))
			if err != nil {
				t.Fatalf("GOMEMLIMIT: %v", err)
			}
			// Room for what the Go runtime does not count.
			if soft > max*9/10 {
				t.Errorf("GOMEMLIMIT %d bytes is not below 90%% of the memory limit %d", soft, max)
			}
		}},
		{"producer pipes gen into produce", func(t *testing.T) {
			s, ok := c.Services["producer"]
			if !ok {
				t.Skip("no producer service")
			}
			if len(s.Profiles) == 0 {
				t.Error("producer should sit behind a profile, not start by default")
			}
			script := fmt.Sprint(s.Command)
			for _, want := range []string{"riskstream gen", "riskstream produce", "--brokers kafka:9092", "|"} {
				if !strings.Contains(script, want) {
					t.Errorf("producer command lacks %q: %q", want, script)
				}
			}
		}},
		{"grafana 3000 and prometheus 9090 are published", func(t *testing.T) {
			var all []string
			for _, s := range c.Services {
				all = append(all, publishedPorts(s)...)
			}
			for _, p := range []string{"3000", "9090"} {
				if !slices.Contains(all, p) {
					t.Errorf("port %s is not published (published: %v)", p, all)
				}
			}
		}},
		{"bind mounts exist and named volumes are declared", func(t *testing.T) {
			for name, s := range c.Services {
				for _, m := range mounts(s) {
					if strings.HasPrefix(m.source, ".") || strings.HasPrefix(m.source, "/") {
						if _, err := os.Stat(filepath.Join(root, m.source)); err != nil {
							t.Errorf("%s mounts %s: %v", name, m.source, err)
						}
					} else if _, ok := c.Volumes[m.source]; !ok {
						t.Errorf("%s uses volume %q, not declared under volumes:", name, m.source)
					}
				}
			}
		}},
		{"prometheus and grafana mount their configuration", func(t *testing.T) {
			want := map[string]mount{
				"prometheus": {"./deploy/prometheus.yml", "/etc/prometheus/prometheus.yml"},
				"grafana":    {"./deploy/grafana/provisioning", "/etc/grafana/provisioning"},
			}
			for name, w := range want {
				if !slices.ContainsFunc(mounts(svc(name)), func(m mount) bool {
					return path.Clean(m.source) == path.Clean(w.source) && m.target == w.target
				}) {
					t.Errorf("%s does not mount %s on %s", name, w.source, w.target)
				}
			}
		}},
		{"build targets are Dockerfile stages", func(t *testing.T) {
			stages := dockerfileStages(t, parseDockerfile(t))
			for name, s := range c.Services {
				m, ok := s.Build.(map[string]any)
				if !ok {
					continue
				}
				if target, ok := m["target"].(string); ok && !slices.Contains(stages, target) {
					t.Errorf("%s builds target %q; the Dockerfile's stages are %v", name, target, stages)
				}
			}
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, tt.check)
	}
}

// --- prometheus.yml -------------------------------------------------------

func TestPrometheus(t *testing.T) {
	b, err := os.ReadFile("prometheus.yml")
	if err != nil {
		t.Fatal(err)
	}
	var cfg struct {
		ScrapeConfigs []struct {
			JobName       string `yaml:"job_name"`
			MetricsPath   string `yaml:"metrics_path"`
			StaticConfigs []struct {
				Targets []string `yaml:"targets"`
			} `yaml:"static_configs"`
		} `yaml:"scrape_configs"`
	}
	if err := yaml.Unmarshal(b, &cfg); err != nil {
		t.Fatalf("prometheus.yml: %v", err)
	}
	found := false
	for _, sc := range cfg.ScrapeConfigs {
		for _, st := range sc.StaticConfigs {
			if slices.Contains(st.Targets, "riskstream:9464") {
				found = true
				if sc.MetricsPath != "" && sc.MetricsPath != "/metrics" {
					t.Errorf("job %s scrapes %s, the job serves /metrics", sc.JobName, sc.MetricsPath)
				}
			}
		}
	}
	if !found {
		t.Error("prometheus.yml does not scrape riskstream:9464")
	}
}

// --- Grafana provisioning ------------------------------------------------

func TestGrafanaProvisioning(t *testing.T) {
	dir := filepath.Join("grafana", "provisioning")
	var files []string
	filepath.WalkDir(dir, func(p string, d os.DirEntry, err error) error {
		if err == nil && !d.IsDir() {
			files = append(files, p)
		}
		return err
	})
	if len(files) == 0 {
		t.Fatalf("no files under %s", dir)
	}
	var datasourceUIDs, providerPaths []string
	for _, f := range files {
		t.Run(f, func(t *testing.T) {
			if ext := filepath.Ext(f); ext != ".yml" && ext != ".yaml" {
				t.Fatalf("unexpected file type %s", ext)
			}
			b, err := os.ReadFile(f)
			if err != nil {
				t.Fatal(err)
			}
			var doc struct {
				APIVersion  int `yaml:"apiVersion"`
				Datasources []struct {
					Name, UID, Type, URL string
				} `yaml:"datasources"`
				Providers []struct {
					Name    string         `yaml:"name"`
					Type    string         `yaml:"type"`
					Options map[string]any `yaml:"options"`
				} `yaml:"providers"`
			}
			if err := yaml.Unmarshal(b, &doc); err != nil {
				t.Fatal(err)
			}
			if doc.APIVersion != 1 {
				t.Errorf("apiVersion = %d, want 1", doc.APIVersion)
			}
			switch filepath.Base(filepath.Dir(f)) {
			case "datasources":
				if len(doc.Datasources) == 0 {
					t.Error("no datasources")
				}
				for _, ds := range doc.Datasources {
					if ds.Type == "prometheus" && ds.URL != "http://prometheus:9090" {
						t.Errorf("datasource %s url %q, want http://prometheus:9090", ds.Name, ds.URL)
					}
					datasourceUIDs = append(datasourceUIDs, ds.UID)
				}
			case "dashboards":
				if len(doc.Providers) == 0 {
					t.Error("no dashboard providers")
				}
				for _, p := range doc.Providers {
					ps, _ := p.Options["path"].(string)
					if p.Type != "file" || ps == "" {
						t.Errorf("provider %s: type %q path %q, want a file provider with a path", p.Name, p.Type, ps)
					}
					providerPaths = append(providerPaths, ps)
				}
			default:
				t.Errorf("%s is not in datasources/ or dashboards/", f)
			}
		})
	}

	// Each provider path is where compose mounts deploy/grafana/dashboards.
	c := loadCompose(t)
	for _, p := range providerPaths {
		if !slices.ContainsFunc(mounts(c.Services["grafana"]), func(m mount) bool {
			return m.target == p && path.Clean(m.source) == "deploy/grafana/dashboards"
		}) {
			t.Errorf("dashboard provider path %s: grafana does not mount ./deploy/grafana/dashboards there", p)
		}
	}
	// Every datasource uid a dashboard names is provisioned.
	for _, d := range loadDashboards(t) {
		uids := d.datasourceUIDs()
		slices.Sort(uids)
		for _, uid := range slices.Compact(uids) {
			if !slices.Contains(datasourceUIDs, uid) && !strings.HasPrefix(uid, "$") && uid != "-- Grafana --" {
				t.Errorf("dashboard %s uses datasource uid %q; provisioned: %v", d.file, uid, datasourceUIDs)
			}
		}
	}
}

// --- dashboards -----------------------------------------------------------

type dashboard struct {
	file string
	UID  string `json:"uid"`
	// Title is the dashboard's title.
	Title         string  `json:"title"`
	SchemaVersion int     `json:"schemaVersion"`
	Panels        []panel `json:"panels"`
	Templating    struct {
		List []struct {
			Name       string `json:"name"`
			Type       string `json:"type"`
			Definition string `json:"definition"`
			Query      any    `json:"query"`
		} `json:"list"`
	} `json:"templating"`
}

type panel struct {
	ID         int            `json:"id"`
	Type       string         `json:"type"`
	Title      string         `json:"title"`
	Datasource map[string]any `json:"datasource"`
	Panels     []panel        `json:"panels"` // a collapsed row's panels
	Targets    []struct {
		RefID      string         `json:"refId"`
		Expr       string         `json:"expr"`
		Format     string         `json:"format"`
		Datasource map[string]any `json:"datasource"`
	} `json:"targets"`
}

// all returns the panels, with the ones inside collapsed rows.
func (d dashboard) all() []panel {
	var out []panel
	var walk func([]panel)
	walk = func(ps []panel) {
		for _, p := range ps {
			out = append(out, p)
			walk(p.Panels)
		}
	}
	walk(d.Panels)
	return out
}

func (d dashboard) datasourceUIDs() []string {
	var out []string
	add := func(m map[string]any) {
		if uid, ok := m["uid"].(string); ok {
			out = append(out, uid)
		}
	}
	for _, p := range d.all() {
		add(p.Datasource)
		for _, tg := range p.Targets {
			add(tg.Datasource)
		}
	}
	return out
}

func loadDashboards(t *testing.T) []dashboard {
	t.Helper()
	files, err := filepath.Glob(filepath.Join("grafana", "dashboards", "*.json"))
	if err != nil || len(files) == 0 {
		t.Fatalf("no dashboards in grafana/dashboards (%v)", err)
	}
	var out []dashboard
	for _, f := range files {
		b, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		d := dashboard{file: f}
		if err := json.Unmarshal(b, &d); err != nil {
			t.Fatalf("%s: %v", f, err)
		}
		out = append(out, d)
	}
	return out
}

// promKeywords are PromQL words that are not metric names.
var promKeywords = map[string]bool{
	"by": true, "without": true, "on": true, "ignoring": true, "group_left": true, "group_right": true,
	"bool": true, "and": true, "or": true, "unless": true, "offset": true, "atan2": true,
	"inf": true, "nan": true,
}

var (
	promStrings   = regexp.MustCompile(`"(?:[^"\\]|\\.)*"|'(?:[^'\\]|\\.)*'|` + "`[^`]*`")
	promMatchers  = regexp.MustCompile(`\{[^}]*\}`)
	promRanges    = regexp.MustCompile(`\[[^\]]*\]`)
	promGrouping  = regexp.MustCompile(`\b(?:by|without|on|ignoring|group_left|group_right)\s*\([^)]*\)`)
	promIdent     = regexp.MustCompile(`[A-Za-z_:][A-Za-z0-9_:]*`)
	promNumber    = regexp.MustCompile(`^(?:0x[0-9a-fA-F]+|[0-9]+(?:\.[0-9]*)?(?:[eE][+-]?[0-9]+)?)`)
	labelValuesRe = regexp.MustCompile(`^\s*label_values\(\s*(.*?)\s*,\s*[A-Za-z_][A-Za-z0-9_]*\s*\)\s*$`)
)

// selector is one metric name an expression selects.
type selector struct {
	name string
	// fn is the function or aggregation the selector is an argument of
	// ("" at the top level).
	fn string
	// ranged is set for a range vector (name[5m]).
	ranged bool
}

// selectors returns what a PromQL expression selects: the identifiers left
// once strings, label matchers, grouping clauses, function calls,
// keywords and numbers are taken out.
func selectors(expr string) []selector {
	s := promStrings.ReplaceAllString(expr, `""`)
	s = promMatchers.ReplaceAllString(s, " ")
	s = promRanges.ReplaceAllString(s, "[]")
	s = promGrouping.ReplaceAllString(s, " ")
	var out []selector
	for _, loc := range promIdent.FindAllStringIndex(s, -1) {
		id := s[loc[0]:loc[1]]
		if loc[0] > 0 {
			prev := s[loc[0]-1]
			if prev == '$' || (prev >= '0' && prev <= '9') || prev == '.' {
				continue // a variable ($heatmap, $__rate_interval) or a number's exponent/suffix
			}
		}
		if promKeywords[strings.ToLower(id)] || promNumber.MatchString(id) {
			continue
		}
		rest := strings.TrimLeft(s[loc[1]:], " \t\n")
		if strings.HasPrefix(rest, "(") {
			continue // a function or aggregation
		}
		out = append(out, selector{name: id, fn: enclosingCall(s[:loc[0]]), ranged: strings.HasPrefix(rest, "[")})
	}
	return out
}

// enclosingCall returns the name of the call whose parenthesis is the
// innermost one still open at the end of before.
func enclosingCall(before string) string {
	depth := 0
	for i := len(before) - 1; i >= 0; i-- {
		switch before[i] {
		case ')':
			depth++
		case '(':
			if depth > 0 {
				depth--
				continue
			}
			head := strings.TrimRight(before[:i], " \t\n")
			ids := promIdent.FindAllString(head, -1)
			if len(ids) == 0 || !strings.HasSuffix(head, ids[len(ids)-1]) {
				return "" // a plain parenthesis
			}
			return ids[len(ids)-1]
		}
	}
	return ""
}

// metricNames returns the metric names a PromQL expression selects.
func metricNames(expr string) []string {
	var out []string
	for _, sel := range selectors(expr) {
		out = append(out, sel.name)
	}
	return out
}

// groupsByLE matches a grouping clause that keeps le.
var groupsByLE = regexp.MustCompile(`\bby\s*\([^)]*\ble\b[^)]*\)`)

// checkQuery returns what is wrong with a dashboard expression: a series
// the job does not expose; a counter or histogram series not under rate,
// irate or increase (its raw value is the count since the job started);
// a gauge under them; histogram buckets not grouped by le; or
// histogram_quantile over anything but buckets.
func checkQuery(expr string) []string {
	var problems []string
	bucketsUsed := false
	for _, sel := range selectors(expr) {
		s, ok := lookupSeries(sel.name)
		if !ok {
			problems = append(problems, fmt.Sprintf("unknown metric %q", sel.name))
			continue
		}
		rated := sel.ranged && (sel.fn == "rate" || sel.fn == "irate" || sel.fn == "increase")
		switch {
		case s.counting() && !rated:
			problems = append(problems, fmt.Sprintf("%s is a %s: take its rate or increase", sel.name, s.typ))
		case !s.counting() && (sel.fn == "rate" || sel.fn == "irate" || sel.fn == "increase"):
			problems = append(problems, fmt.Sprintf("%s is a gauge: %s of it means nothing", sel.name, sel.fn))
		}
		if s.suffix == "_bucket" {
			bucketsUsed = true
		}
	}
	if bucketsUsed && !groupsByLE.MatchString(expr) {
		problems = append(problems, "histogram buckets not grouped by (le)")
	}
	if strings.Contains(expr, "histogram_quantile(") && !bucketsUsed {
		problems = append(problems, "histogram_quantile over no histogram's _bucket series")
	}
	return problems
}

func TestCheckQuery(t *testing.T) {
	for expr, want := range map[string]string{
		`sum by (le) (increase(riskstream_request_latency_seconds_bucket{key=~"$key"}[$__rate_interval]))`:                        "",
		`histogram_quantile(0.99, sum by (le) (rate(riskstream_event_decision_latency_seconds_bucket[5m])))`:                      "",
		`sum(rate(riskstream_checkpoint_duration_seconds_sum[1m])) / sum(rate(riskstream_checkpoint_duration_seconds_count[1m]))`: "",
		`riskstream_heatmap_window_latency_seconds{quantile="0.99"}`:                                                              "",
		`max by (key) (riskstream_source_skew_seconds)`:                                                                           "",
		`sum by (key) (increase(riskstream_request_latency_seconds_bucket[5m]))`:                                                  "not grouped by (le)",
		`sum by (le) (riskstream_request_latency_seconds_bucket)`:                                                                 "take its rate",
		`histogram_quantile(0.99, sum by (le) (rate(riskstream_heatmap_window_latency_seconds[5m])))`:                             "is a gauge",
		`histogram_quantile(0.99, riskstream_heatmap_window_latency_seconds)`:                                                     "over no histogram",
		`riskstream_heatmap_window_latency_seconds_bucket`:                                                                        "unknown metric",
		`sum(riskstream_events_total)`:                                                                                            "take its rate",
		`rate(riskstream_state_bytes[5m])`:                                                                                        "is a gauge",
	} {
		got := strings.Join(checkQuery(expr), "; ")
		if want == "" && got != "" || !strings.Contains(got, want) {
			t.Errorf("checkQuery(%q) = %q, want %q", expr, got, want)
		}
	}
}

func TestMetricNames(t *testing.T) {
	tests := []struct {
		expr string
		want []string
	}{
		{`rate(riskstream_events_total[$__rate_interval])`, []string{"riskstream_events_total"}},
		{`sum by (rule, action) (rate(riskstream_decisions_total{rule=~"pay.*"}[5m]))`, []string{"riskstream_decisions_total"}},
		{`histogram_quantile(0.99, sum by (le) (rate(riskstrem_x_bucket[1m])))`, []string{"riskstrem_x_bucket"}},
		{`sum(rate(a_sum[1m])) / sum(rate(a_count[1m])) > 1e-3`, []string{"a_sum", "a_count"}},
		{`riskstream_source_degraded == bool 1 offset 5m`, []string{"riskstream_source_degraded"}},
		{`sum without (instance) (up) * on (job) group_left (x) foo`, []string{"up", "foo"}},
		{`{__name__="riskstream_state_bytes"}`, nil},
	}
	for _, tt := range tests {
		if got := metricNames(tt.expr); !slices.Equal(got, tt.want) {
			t.Errorf("metricNames(%q) = %q, want %q", tt.expr, got, tt.want)
		}
	}
}

func TestDashboards(t *testing.T) {
	dashboards := loadDashboards(t)
	uids := map[string]string{}
	for _, d := range dashboards {
		t.Run(filepath.Base(d.file), func(t *testing.T) {
			if d.UID == "" || len(d.UID) > 40 {
				t.Errorf("uid %q: want 1 to 40 characters", d.UID)
			}
			if other, dup := uids[d.UID]; dup {
				t.Errorf("uid %q is also the uid of %s", d.UID, other)
			}
			uids[d.UID] = d.file
			if d.Title == "" {
				t.Error("no title")
			}
			if d.SchemaVersion < 39 {
				t.Errorf("schemaVersion %d, want >= 39", d.SchemaVersion)
			}

			vars := map[string]bool{}
			used := map[string]bool{}
			check := func(where, expr string) {
				for _, m := range metricNames(expr) {
					used[m] = true
				}
				for _, p := range checkQuery(expr) {
					t.Errorf("%s: %s in %q", where, p, expr)
				}
			}
			// A variable's label_values names a series, of any type.
			checkName := func(where, expr string) {
				for _, m := range metricNames(expr) {
					if _, ok := lookupSeries(m); !ok {
						t.Errorf("%s: unknown metric %q in %q", where, m, expr)
					}
				}
			}
			for _, v := range d.Templating.List {
				vars[v.Name] = true
				if v.Type != "query" {
					continue
				}
				q := v.Definition
				if m, ok := v.Query.(map[string]any); ok && q == "" {
					q, _ = m["query"].(string)
				} else if s, ok := v.Query.(string); ok && q == "" {
					q = s
				}
				sub := labelValuesRe.FindStringSubmatch(q)
				if sub == nil {
					t.Errorf("variable %s: query %q is not label_values(METRIC, LABEL)", v.Name, q)
					continue
				}
				checkName("variable "+v.Name, sub[1])
			}

			ids := map[int]bool{}
			varRef := regexp.MustCompile(`\$\{?([A-Za-z_][A-Za-z0-9_]*)`)
			for _, p := range d.all() {
				where := fmt.Sprintf("panel %d %q", p.ID, p.Title)
				if ids[p.ID] {
					t.Errorf("%s: duplicate panel id", where)
				}
				ids[p.ID] = true
				if p.Title == "" {
					t.Errorf("%s: no title", where)
				}
				if p.Type == "row" {
					continue
				}
				if len(p.Targets) == 0 {
					t.Errorf("%s: no targets", where)
				}
				refs := map[string]bool{}
				for _, tg := range p.Targets {
					if strings.TrimSpace(tg.Expr) == "" {
						t.Errorf("%s: target %s has no expr", where, tg.RefID)
					}
					if refs[tg.RefID] {
						t.Errorf("%s: duplicate refId %q", where, tg.RefID)
					}
					refs[tg.RefID] = true
					check(where, tg.Expr)
					for _, r := range varRef.FindAllStringSubmatch(tg.Expr+" "+p.Title, -1) {
						if !strings.HasPrefix(r[1], "__") && !vars[r[1]] {
							t.Errorf("%s: $%s is not a dashboard variable", where, r[1])
						}
					}
				}
				if p.Type == "heatmap" {
					for _, tg := range p.Targets {
						if tg.Format != "heatmap" {
							t.Errorf("%s: heatmap target %s has format %q, want heatmap", where, tg.RefID, tg.Format)
						}
						if !strings.Contains(tg.Expr, "by (le)") {
							t.Errorf("%s: heatmap target %s does not sum by (le)", where, tg.RefID)
						}
						// Grafana's heatmap format takes cumulative
						// buckets apart: only a histogram's are.
						for _, m := range metricNames(tg.Expr) {
							if s, _ := lookupSeries(m); s.suffix != "_bucket" {
								t.Errorf("%s: heatmap target %s selects %s, not a histogram's _bucket series", where, tg.RefID, m)
							}
						}
					}
				}
			}

			var missing []string
			for _, m := range metricsShown {
				if !used[m] {
					missing = append(missing, m)
				}
			}
			sort.Strings(missing)
			if len(missing) > 0 {
				t.Errorf("no panel shows %v", missing)
			}
		})
	}
}

// --- Dockerfile -----------------------------------------------------------

// instruction is one Dockerfile instruction, continuation lines joined.
type instruction struct {
	cmd  string // upper case: FROM, RUN, ...
	args string
}

func parseDockerfile(t *testing.T) []instruction {
	t.Helper()
	f, err := os.Open(filepath.Join(root, "Dockerfile"))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	var out []instruction
	var cur strings.Builder
	flush := func() {
		line := strings.TrimSpace(cur.String())
		cur.Reset()
		if line == "" {
			return
		}
		cmd, args, _ := strings.Cut(line, " ")
		out = append(out, instruction{strings.ToUpper(cmd), strings.TrimSpace(args)})
	}
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		line := sc.Text()
		trimmed := strings.TrimSpace(line)
		if strings.HasPrefix(trimmed, "#") {
			continue // comments (and parser directives) never continue a line
		}
		if body, ok := strings.CutSuffix(strings.TrimRight(line, " \t"), `\`); ok {
			cur.WriteString(body + " ")
			continue
		}
		cur.WriteString(line)
		flush()
	}
	if err := sc.Err(); err != nil {
		t.Fatal(err)
	}
	flush()
	if len(out) == 0 {
		t.Fatal("empty Dockerfile")
	}
	return out
}

// dockerfileStages returns the stage names (FROM ... AS name).
func dockerfileStages(t *testing.T, ins []instruction) []string {
	var out []string
	for _, in := range ins {
		if in.cmd != "FROM" {
			continue
		}
		f := strings.Fields(in.args)
		if len(f) >= 3 && strings.EqualFold(f[len(f)-2], "AS") {
			out = append(out, f[len(f)-1])
		}
	}
	return out
}

// goModVersion is the Go version go.mod requires: its toolchain line, else
// its go line.
func goModVersion(t *testing.T) string {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(root, "go.mod"))
	if err != nil {
		t.Fatal(err)
	}
	var goLine, toolchain string
	for _, line := range strings.Split(string(b), "\n") {
		f := strings.Fields(line)
		if len(f) == 2 && f[0] == "go" {
			goLine = f[1]
		}
		if len(f) == 2 && f[0] == "toolchain" {
			toolchain = strings.TrimPrefix(f[1], "go")
		}
	}
	if toolchain != "" {
		return toolchain
	}
	if goLine == "" {
		t.Fatal("go.mod has no go line")
	}
	return goLine
}

func TestDockerfile(t *testing.T) {
	ins := parseDockerfile(t)
	known := map[string]bool{"FROM": true, "RUN": true, "CMD": true, "LABEL": true, "EXPOSE": true, "ENV": true,
		"ADD": true, "COPY": true, "ENTRYPOINT": true, "VOLUME": true, "USER": true, "WORKDIR": true, "ARG": true,
		"ONBUILD": true, "STOPSIGNAL": true, "HEALTHCHECK": true, "SHELL": true}
	args := map[string]string{}
	var stages [][]instruction
	for _, in := range ins {
		if !known[in.cmd] {
			t.Errorf("unknown instruction %s %s", in.cmd, in.args)
		}
		switch {
		case in.cmd == "ARG" && len(stages) == 0:
			k, v, _ := strings.Cut(in.args, "=")
			args[k] = v
		case in.cmd == "FROM":
			stages = append(stages, nil)
		case len(stages) == 0:
			t.Errorf("%s before the first FROM", in.cmd)
		}
		if len(stages) > 0 {
			stages[len(stages)-1] = append(stages[len(stages)-1], in)
		}
	}
	image := func(stage []instruction) string {
		img := strings.Fields(stage[0].args)[0]
		return os.Expand(img, func(k string) string { return args[k] })
	}
	if len(stages) < 2 {
		t.Fatalf("%d stages, want a multi-stage build", len(stages))
	}
	final := stages[len(stages)-1]
	find := func(stage []instruction, cmd string) []instruction {
		var out []instruction
		for _, in := range stage {
			if in.cmd == cmd {
				out = append(out, in)
			}
		}
		return out
	}

	tests := []struct {
		name  string
		check func(t *testing.T)
	}{
		{"the builder is the golang image of go.mod's version and builds ./cmd/riskstream", func(t *testing.T) {
			// The golang images set GOTOOLCHAIN=local: an image older
			// than go.mod's go (or toolchain) line refuses the module.
			want := "golang:" + goModVersion(t)
			if img := image(stages[0]); img != want && !strings.HasPrefix(img, want+"-") {
				t.Errorf("builder image %q, want %s (go.mod's version)", img, want)
			}
			built := false
			for _, r := range find(stages[0], "RUN") {
				if strings.Contains(r.args, "go build") && strings.Contains(r.args, "./cmd/riskstream") && strings.Contains(r.args, "-o /riskstream") {
					built = true
				}
			}
			if !built {
				t.Error("no RUN go build -o /riskstream ./cmd/riskstream in the builder stage")
			}
		}},
		{"the runtime image has an ENTRYPOINT running riskstream", func(t *testing.T) {
			eps := find(final, "ENTRYPOINT")
			if len(eps) == 0 {
				t.Fatal("no ENTRYPOINT in the final stage")
			}
			var ep []string
			if err := json.Unmarshal([]byte(eps[len(eps)-1].args), &ep); err != nil || len(ep) == 0 {
				t.Fatalf("ENTRYPOINT %s: want the exec (JSON) form (%v)", eps[len(eps)-1].args, err)
			}
			if path.Base(ep[0]) != "riskstream" {
				t.Errorf("ENTRYPOINT runs %s, want riskstream", ep[0])
			}
			copied := false
			for _, c := range find(final, "COPY") {
				if strings.Contains(c.args, "/riskstream") && strings.Contains(c.args, ep[0]) {
					copied = true
				}
			}
			if !copied {
				t.Errorf("the final stage does not COPY the binary to %s", ep[0])
			}
		}},
		{"the runtime image runs as a non-root user", func(t *testing.T) {
			users := find(final, "USER")
			nonrootBase := strings.Contains(image(final), "nonroot")
			if len(users) == 0 && !nonrootBase {
				t.Fatal("no USER in the final stage")
			}
			if len(users) > 0 {
				u, _, _ := strings.Cut(users[len(users)-1].args, ":")
				if u == "root" || u == "0" {
					t.Errorf("USER %s", users[len(users)-1].args)
				}
			}
		}},
		{"the rules ship at /etc/riskstream/rules.yaml", func(t *testing.T) {
			ok := false
			for _, c := range find(final, "COPY") {
				f := strings.Fields(c.args)
				if len(f) >= 2 && strings.HasSuffix(f[len(f)-2], "testdata/rules.yaml") && f[len(f)-1] == "/etc/riskstream/rules.yaml" {
					ok = true
				}
			}
			if !ok {
				t.Error("the final stage does not COPY testdata/rules.yaml to /etc/riskstream/rules.yaml")
			}
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, tt.check)
	}
}

// TestDockerignore: the build context keeps what the build needs.
func TestDockerignore(t *testing.T) {
	b, err := os.ReadFile(filepath.Join(root, ".dockerignore"))
	if err != nil {
		t.Fatal(err)
	}
	var patterns []string
	for _, line := range strings.Split(string(b), "\n") {
		line = strings.TrimSpace(line)
		if line != "" && !strings.HasPrefix(line, "#") {
			patterns = append(patterns, line)
		}
	}
	// excluded follows the .dockerignore rules closely enough for plain
	// paths: the last matching pattern wins, ! re-includes, a pattern
	// matching a parent folder excludes what is inside it.
	excluded := func(p string) bool {
		out := false
		for _, pat := range patterns {
			neg := strings.HasPrefix(pat, "!")
			pat = strings.TrimPrefix(strings.TrimPrefix(pat, "!"), "/")
			pat = strings.TrimSuffix(strings.TrimPrefix(pat, "**/"), "/")
			for q := p; q != "."; q = path.Dir(q) {
				if ok, _ := path.Match(pat, q); ok {
					out = !neg
					break
				}
			}
		}
		return out
	}
	for _, p := range []string{"go.mod", "go.sum", "cmd/riskstream/main.go", "testdata/rules.yaml", "engine/engine.go"} {
		if excluded(p) {
			t.Errorf(".dockerignore excludes %s, which the build needs", p)
		}
	}
	for _, p := range []string{".git", "riskstream"} {
		if !excluded(p) {
			t.Errorf(".dockerignore keeps %s in the build context", p)
		}
	}
}
