module github.com/kcl-flux/kcl-artifact-controller

go 1.26.0

require (
	github.com/ebitengine/purego v0.9.1
	github.com/spf13/pflag v1.0.10
	google.golang.org/protobuf v1.36.11
)

require (
	github.com/BurntSushi/toml v1.5.0
	go.yaml.in/yaml/v3 v3.0.6
)
