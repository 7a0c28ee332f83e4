package main

import (
	"fmt"

	"github.com/riskstream/riskstream/internal/buildinfo"
	"github.com/spf13/cobra"
)

func newVersionCmd() *cobra.Command {
	return &cobra.Command{
		Use:   "version",
		Short: "Print the build: module version, VCS revision and commit time, Go version",
		Long: `Print the build of this binary, as the Go toolchain recorded it: the module
version (a tag when built by 'go install ...@version', "(devel)" from a
checkout), the VCS revision and its commit time ("-modified" when built
from a work tree with uncommitted changes; unknown when built without VCS
information, e.g. with -buildvcs=false), and the Go version and platform.
The live job exports the same as riskstream_build_info.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			_, err := fmt.Fprint(cmd.OutOrStdout(), buildinfo.Read())
			return err
		},
	}
}
