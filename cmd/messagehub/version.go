package main

import (
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

// Stamps a build without VCS data (the container image, built without .git)
// is given with -ldflags "-X main.stampedVersion=... -X main.stampedRevision=...
// -X main.stampedTime=...".
var stampedVersion, stampedRevision, stampedTime string

// readBuildInfo reads the module and VCS stamps Go embeds in every binary,
// or the stamps given at link time.
func readBuildInfo() (info buildInfo) {
	info = buildInfo{Version: "(devel)", Revision: "unknown", Time: "unknown"}
	defer func() {
		for _, s := range []struct{ stamp, into *string }{
			{&stampedVersion, &info.Version}, {&stampedRevision, &info.Revision}, {&stampedTime, &info.Time},
		} {
			if *s.stamp != "" {
				*s.into = *s.stamp
			}
		}
	}()
	bi, ok := debug.ReadBuildInfo()
	if !ok {
		return info
	}
	info.GoVersion = bi.GoVersion
	if bi.Main.Version != "" {
		info.Version = bi.Main.Version
	}
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
	return info
}

func (b buildInfo) String() string {
	modified := ""
	if b.Modified {
		modified = " (modified)"
	}
	return fmt.Sprintf("messagehub %s\ncommit %s%s\nbuilt from a commit of %s\n%s\n", b.Version, b.Revision, modified, b.Time, b.GoVersion)
}
