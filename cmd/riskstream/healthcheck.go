package main

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"time"

	"github.com/spf13/cobra"
)

func newHealthcheckCmd() *cobra.Command {
	var url string
	var timeout time.Duration
	cmd := &cobra.Command{
		Use:   "healthcheck [--url URL]",
		Short: "Exit 0 when a running job answers on /healthz (a container's health check)",
		Long: `Ask a running job's /healthz (served on run's --metrics-addr) and exit 0
when it answers 200 OK, non-zero otherwise. The container image has no
shell, curl or wget: docker compose and Kubernetes exec probes run this.`,
		Example: `  riskstream healthcheck --url http://127.0.0.1:9464/healthz`,
		Args:    cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			ctx, cancel := context.WithTimeout(cmd.Context(), timeout)
			defer cancel()
			req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
			if err != nil {
				return fmt.Errorf("healthcheck: %w", err)
			}
			resp, err := http.DefaultClient.Do(req)
			if err != nil {
				return fmt.Errorf("healthcheck: %w", err)
			}
			defer resp.Body.Close()
			io.Copy(io.Discard, io.LimitReader(resp.Body, 4<<10))
			if resp.StatusCode != http.StatusOK {
				return fmt.Errorf("healthcheck: %s answered %s", url, resp.Status)
			}
			return nil
		},
	}
	f := cmd.Flags()
	f.StringVar(&url, "url", "http://127.0.0.1:9464/healthz", "the job's /healthz (run's --metrics-addr)")
	f.DurationVar(&timeout, "timeout", 3*time.Second, "how long to wait for the answer")
	return cmd
}
