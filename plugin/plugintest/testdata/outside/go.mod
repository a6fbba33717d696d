// A device kind in a module of its own, written only against goffload's
// public plugin contract: plugintest's TestOutOfModulePlugin builds and
// tests it offline (GOFLAGS=-mod=mod GOPROXY=off GOWORK=off), against this
// checkout through the replace directive.
module example.com/outside

go 1.26

require github.com/goffload/offload v0.0.0

require (
	github.com/ebitengine/purego v0.11.3 // indirect
	github.com/google/btree v1.1.3 // indirect
)

replace github.com/goffload/offload => ../../../..
