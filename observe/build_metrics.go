package observe

import (
	"errors"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/riskstream/riskstream/internal/buildinfo"
)

// registerBuildMetrics registers, on the job's registry, what an exporter
// is expected to have besides its own metrics: riskstream_build_info (1,
// with the version, VCS revision and Go version as labels, to join on
// or to see a rollout), and the Go runtime's go_* and the process's
// process_* metrics. A registry given them already keeps its own.
func registerBuildMetrics(reg prometheus.Registerer) {
	info := buildinfo.Read()
	build := prometheus.NewGauge(prometheus.GaugeOpts{Name: "riskstream_build_info",
		Help:        "1, labelled with the build's version, VCS revision and Go version.",
		ConstLabels: prometheus.Labels{"version": info.Version, "revision": info.RevisionLabel(), "goversion": info.GoVersion}})
	build.Set(1)
	for _, c := range []prometheus.Collector{build, collectors.NewGoCollector(),
		collectors.NewProcessCollector(collectors.ProcessCollectorOpts{})} {
		if err := reg.Register(c); err != nil {
			var already prometheus.AlreadyRegisteredError
			if !errors.As(err, &already) {
				panic(err) // as MustRegister: the descriptors are constants
			}
		}
	}
}
