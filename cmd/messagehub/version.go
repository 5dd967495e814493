package main

import (
	"cmp"
	"fmt"
	"runtime/debug"
)

// buildInfo is what the binary knows about how it was built.
type buildInfo struct {
	Version   string // module version, "(devel)" for a local build
	Revision  string // VCS commit, "unknown" when built without VCS data
	Time      string // commit time
	Modified  bool   // built from a tree with uncommitted changes
	GoVersion string
}

// Stamps given at link time to a build without VCS data (the container
// image): -ldflags "-X main.stampedVersion=... -X main.stampedRevision=... -X main.stampedTime=...".
var stampedVersion, stampedRevision, stampedTime string

// readBuildInfo reads the stamps Go embeds in every binary, or those given
// at link time.
func readBuildInfo() buildInfo {
	info := buildInfo{Version: "(devel)", Revision: "unknown", Time: "unknown"}
	if bi, ok := debug.ReadBuildInfo(); ok {
		info.GoVersion = bi.GoVersion
		info.Version = cmp.Or(bi.Main.Version, info.Version)
		for _, s := range bi.Settings {
			switch s.Key {
			case "vcs.revision":
				info.Revision = s.Value
			case "vcs.time":
				info.Time = s.Value
			case "vcs.modified":
				info.Modified = s.Value == "true"
			}
		}
	}
	info.Version = cmp.Or(stampedVersion, info.Version)
	info.Revision = cmp.Or(stampedRevision, info.Revision)
	info.Time = cmp.Or(stampedTime, info.Time)
	return info
}

func (b buildInfo) String() string {
	modified := ""
	if b.Modified {
		modified = " (modified)"
	}
	return fmt.Sprintf("messagehub %s\ncommit %s%s\nbuilt from a commit of %s\n%s\n", b.Version, b.Revision, modified, b.Time, b.GoVersion)
}
