module github.com/goffload/offload

go 1.26

require (
	github.com/ebitengine/purego v0.11.3
	github.com/google/btree v1.1.3
)
