package main

import (
	"strings"
	"testing"
)

func TestBuildInfoNamesTheCommit(t *testing.T) {
	info := readBuildInfo()
	if info.GoVersion == "" || info.Revision == "" || !strings.Contains(info.String(), "commit "+info.Revision) {
		t.Fatalf("build info: %+v\n%s", info, info)
	}
}

func TestLinkTimeStampsNameTheBuild(t *testing.T) {
	stampedVersion, stampedRevision, stampedTime = "v1.2.3", "0123abc", "2026-11-22T12:00:00Z"
	defer func() { stampedVersion, stampedRevision, stampedTime = "", "", "" }()
	out := readBuildInfo().String()
	for _, want := range []string{"messagehub v1.2.3", "commit 0123abc", "2026-11-22T12:00:00Z"} {
		if !strings.Contains(out, want) {
			t.Errorf("--version does not say %q:\n%s", want, out)
		}
	}
}
