module github.com/sluicequeue/sluice/internal/migrationtools

go 1.26.0

replace github.com/sluicequeue/sluice => ../..

require (
	ariga.io/atlas v0.32.1-0.20250325101103-175b25e1c1b9 // indirect
	github.com/golang-migrate/migrate/v4 v4.20.1 // indirect
	github.com/mfridman/interpolate v0.2.0 // indirect
	github.com/pressly/goose/v3 v3.30.1 // indirect
	github.com/sethvargo/go-retry v0.5.0 // indirect
	go.uber.org/multierr v1.11.0 // indirect
	golang.org/x/sync v0.25.0 // indirect
)
