// Package declaretest tests declare target variables (offload.DeclareTarget,
// offload.DeclareTargetLink) in a test binary of their own: a "to" variable
// is a present-table entry on every device of every runtime the binary
// starts, which the tests of package offload, counting the entries and the
// info lines their constructs leave, must not see.
package declaretest
