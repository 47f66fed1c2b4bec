// Package version holds the build's version, set with -ldflags "-X ...version.Version=v1.2.3".
package version

// Version of this build.
var Version = "dev"
