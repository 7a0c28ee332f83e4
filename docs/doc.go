// Package docs holds riskstream's reference manual, in Markdown. It has no
// code. Its test keeps the manual the single reference: every metric the
// code registers must be in metrics.md, every field the rules parser
// accepts in rules.md, every page and section that a comment or a link
// names must exist, and the examples must parse. The flags of the commands
// are checked by cmd/riskstream's TestFlagsDocumented, which builds them.
package docs
