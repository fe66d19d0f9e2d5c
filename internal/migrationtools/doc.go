// Package migrationtools holds the tests that apply the files of
// `sluice migrate sql --format goose|golang-migrate|atlas` with each tool
// itself, as a Go library. It is a module of its own so that the tools and
// their dependencies stay out of sluice's go.mod; .ci/run runs its tests.
package migrationtools
