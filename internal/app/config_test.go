package app

import (
	"errors"
	"flag"
	"io"
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/energydatahub/messagehub/internal/domain"
	"github.com/energydatahub/messagehub/internal/store/cosmos"
)

func envOf(m map[string]string) func(string) string {
	return func(k string) string { return m[k] }
}

var defaultLimits = Limits{
	HTTPReadTimeout: time.Minute, HTTPWriteTimeout: 2 * time.Minute, HTTPIdleTimeout: 2 * time.Minute,
	MaxConnections: 1000, GRPCMaxStreams: 100, GRPCMaxConnAge: 30 * time.Minute, HTTPBodyMemory: 128 << 20,
	GRPCHandshake: 10 * time.Second, GRPCSaveMemory: 128 << 20,
}

func TestParseConfig(t *testing.T) {
	defaults := Config{
		GRPCAddr:        "127.0.0.1:50051",
		HTTPAddr:        "127.0.0.1:8080",
		Auth:            "none",
		JWTActorClaim:   "sub",
		Store:           "embedded",
		DataDir:         "./data",
		MaxBundleWeight: 51200,
		Retention:       168 * time.Hour,
		LogLevel:        slog.LevelInfo,
		Cosmos:          CosmosConfig{Database: "messagehub", Provision: true, IDBuckets: 4, Throughput: defaultCosmosThroughput},
		ContentTimeout:  25 * time.Second,
		Content:         ContentConfig{Blob: BlobConfig{Container: "messagehub-content"}, Lease: 30 * time.Second, NoticeGrace: time.Minute, BuildMemory: 256 << 20},
		Limits:          defaultLimits,
		MinFreeDisk:     1 << 30,
	}
	with := func(f func(*Config)) Config {
		c := defaults
		f(&c)
		return c
	}
	tests := []struct {
		name string
		args []string
		env  map[string]string
		want Config
	}{
		{name: "nothing set gives the defaults", want: defaults},
		{
			name: "env beats defaults",
			env: map[string]string{
				"MESSAGEHUB_GRPC_ADDR":         "0.0.0.0:6000",
				"MESSAGEHUB_HTTP_ADDR":         "0.0.0.0:6080",
				"MESSAGEHUB_AUTH":              "jwt",
				"MESSAGEHUB_JWKS_FILE":         "/etc/messagehub/jwks.json",
				"MESSAGEHUB_JWT_ISSUER":        "https://login.example/",
				"MESSAGEHUB_JWT_AUDIENCE":      "messagehub",
				"MESSAGEHUB_JWT_ACTOR_CLAIM":   "azp",
				"MESSAGEHUB_TLS_CERT":          "/tls/cert.pem",
				"MESSAGEHUB_TLS_KEY":           "/tls/key.pem",
				"MESSAGEHUB_STORE":             "embedded",
				"MESSAGEHUB_DATA_DIR":          "/var/lib/messagehub",
				"MESSAGEHUB_MAX_BUNDLE_WEIGHT": "1000",
				"MESSAGEHUB_RETENTION":         "24h",
				"MESSAGEHUB_LOG_LEVEL":         "debug",
			},
			want: Config{
				GRPCAddr: "0.0.0.0:6000", HTTPAddr: "0.0.0.0:6080", Auth: "jwt",
				JWKSFile: "/etc/messagehub/jwks.json", JWTIssuer: "https://login.example/", JWTAudience: "messagehub",
				JWTActorClaim: "azp", TLSCert: "/tls/cert.pem", TLSKey: "/tls/key.pem",
				Store: "embedded", DataDir: "/var/lib/messagehub", Cosmos: defaults.Cosmos,
				MaxBundleWeight: 1000, Retention: 24 * time.Hour, LogLevel: slog.LevelDebug,
				ContentTimeout: 25 * time.Second, Content: defaults.Content, Limits: defaultLimits, MinFreeDisk: 1 << 30,
			},
		},
		{
			name: "flags beat env",
			args: []string{
				"--grpc-addr", "127.0.0.1:0", "--store=embedded", "--data-dir", "/tmp/x",
				"--max-bundle-weight", "7", "--retention", "90m", "--log-level", "warn",
			},
			env: map[string]string{
				"MESSAGEHUB_GRPC_ADDR":         "0.0.0.0:6000",
				"MESSAGEHUB_STORE":             "cosmos",
				"MESSAGEHUB_DATA_DIR":          "/var/lib/messagehub",
				"MESSAGEHUB_MAX_BUNDLE_WEIGHT": "not a number",
				"MESSAGEHUB_RETENTION":         "-1h",
				"MESSAGEHUB_LOG_LEVEL":         "loud",
			},
			want: Config{
				GRPCAddr: "127.0.0.1:0", HTTPAddr: "127.0.0.1:8080", Auth: "none", JWTActorClaim: "sub",
				Store: "embedded", DataDir: "/tmp/x", Cosmos: defaults.Cosmos,
				MaxBundleWeight: 7, Retention: 90 * time.Minute, LogLevel: slog.LevelWarn,
				ContentTimeout: 25 * time.Second, Content: defaults.Content, Limits: defaultLimits, MinFreeDisk: 1 << 30,
			},
		},
		{
			name: "a flag and the env can be mixed per setting",
			args: []string{"--data-dir", "/flag"},
			env:  map[string]string{"MESSAGEHUB_DATA_DIR": "/env", "MESSAGEHUB_MAX_BUNDLE_WEIGHT": "99"},
			want: with(func(c *Config) { c.DataDir, c.MaxBundleWeight = "/flag", 99 }),
		},
		{
			name: "the memory of HTTP bodies takes a size",
			args: []string{"--http-max-body-memory", "512MiB"},
			want: with(func(c *Config) { c.Limits.HTTPBodyMemory = 512 << 20 }),
		},
		{
			name: "the memory of gRPC Saves takes a size",
			env:  map[string]string{"MESSAGEHUB_GRPC_MAX_SAVE_MEMORY": "1GiB"},
			want: with(func(c *Config) { c.Limits.GRPCSaveMemory = 1 << 30 }),
		},
		{
			name: "the memory of document builds takes a size",
			env:  map[string]string{"MESSAGEHUB_CONTENT_MAX_BUILD_MEMORY": "1GiB"},
			want: with(func(c *Config) { c.Content.BuildMemory = 1 << 30 }),
		},
		{
			name: "an empty env variable counts as unset",
			env:  map[string]string{"MESSAGEHUB_GRPC_ADDR": ""},
			want: defaults,
		},
		{
			name: "auth none on ::1 and localhost is loopback",
			args: []string{"--grpc-addr", "[::1]:0", "--http-addr", "localhost:0"},
			want: with(func(c *Config) { c.GRPCAddr, c.HTTPAddr = "[::1]:0", "localhost:0" }),
		},
		{
			name: "jwt on every interface with TLS",
			args: []string{
				"--auth", "jwt", "--grpc-addr", ":50051", "--http-addr", "0.0.0.0:8080",
				"--jwks-file", "/k.json", "--jwt-issuer", "iss", "--jwt-audience", "aud",
				"--tls-cert", "c.pem", "--tls-key", "k.pem",
			},
			want: with(func(c *Config) {
				c.Auth, c.GRPCAddr, c.HTTPAddr = "jwt", ":50051", "0.0.0.0:8080"
				c.JWKSFile, c.JWTIssuer, c.JWTAudience = "/k.json", "iss", "aud"
				c.TLSCert, c.TLSKey = "c.pem", "k.pem"
			}),
		},
		{
			name: "max bundle weight 1 is the smallest accepted",
			args: []string{"--max-bundle-weight=1"},
			want: with(func(c *Config) { c.MaxBundleWeight = 1 }),
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := ParseConfig(tt.args, envOf(tt.env), io.Discard)
			if err != nil {
				t.Fatalf("ParseConfig: %v", err)
			}
			if !reflect.DeepEqual(got, tt.want) {
				t.Errorf("got %+v\nwant %+v", got, tt.want)
			}
		})
	}
}

func TestParseConfigRejectsInvalidValues(t *testing.T) {
	tests := []struct {
		name    string
		args    []string
		env     map[string]string
		wantErr string // a part of the message that tells the operator what is wrong
	}{
		{name: "an unknown store", args: []string{"--store", "mongo"}, wantErr: `"mongo" is not supported`},
		{name: "cosmos without an endpoint", args: []string{"--store", "cosmos"}, wantErr: "--store cosmos needs --cosmos-endpoint"},
		{name: "cosmos provision not a boolean", env: map[string]string{"MESSAGEHUB_COSMOS_PROVISION": "maybe"}, wantErr: "MESSAGEHUB_COSMOS_PROVISION"},
		{name: "zero id buckets", args: []string{"--cosmos-id-buckets", "0"}, wantErr: "1..256"},
		{name: "autoscale below 1000", args: []string{"--cosmos-throughput", "autoscale=500"}, wantErr: "autoscale=<max RU/s>"},
		{name: "manual below 400", args: []string{"--cosmos-throughput", "manual=300"}, wantErr: "manual=<RU/s>"},
		{name: "unknown throughput", args: []string{"--cosmos-throughput", "lots"}, wantErr: "serverless"},
		{name: "an empty cosmos database", args: []string{"--cosmos-database="}, wantErr: "--cosmos-database"},
		{name: "an unknown store from env", env: map[string]string{"MESSAGEHUB_STORE": "memory"}, wantErr: "MESSAGEHUB_STORE"},
		{name: "max bundle weight 0", args: []string{"--max-bundle-weight", "0"}, wantErr: "between 1 and"},
		{name: "negative max bundle weight", args: []string{"--max-bundle-weight=-5"}, wantErr: "between 1 and"},
		{name: "max bundle weight beyond a Peek's answer", args: []string{"--max-bundle-weight=200001"}, wantErr: "between 1 and 200000"},
		{name: "max bundle weight not a number from env", env: map[string]string{"MESSAGEHUB_MAX_BUNDLE_WEIGHT": "lots"}, wantErr: "MESSAGEHUB_MAX_BUNDLE_WEIGHT"},
		{name: "retention not a duration", args: []string{"--retention", "7d"}, wantErr: "not a duration"},
		{name: "zero retention", args: []string{"--retention", "0s"}, wantErr: "between 1s and"},
		{name: "a retention under a second (Cosmos TTLs are whole seconds)", args: []string{"--retention", "500ms"}, wantErr: "between 1s and"},
		{name: "a retention over an int32 of seconds", args: []string{"--retention", "600000h"}, wantErr: "between 1s and"},
		{name: "negative retention from env", env: map[string]string{"MESSAGEHUB_RETENTION": "-1h"}, wantErr: "MESSAGEHUB_RETENTION"},
		{name: "unknown log level", args: []string{"--log-level", "loud"}, wantErr: "log level"},
		{name: "empty grpc address", args: []string{"--grpc-addr", ""}, wantErr: "--grpc-addr"},
		{name: "empty data dir", args: []string{"--data-dir="}, wantErr: "--data-dir"},
		{name: "an unknown flag", args: []string{"--verbose"}, wantErr: "not defined"},
		{name: "a stray argument", args: []string{"serve"}, wantErr: "unexpected arguments"},
		{name: "an empty http address", args: []string{"--http-addr="}, wantErr: "--http-addr"},
		{name: "an unknown auth mode", args: []string{"--auth", "basic"}, wantErr: `"basic"`},
		{name: "auth none on every interface (gRPC)", args: []string{"--grpc-addr", "0.0.0.0:50051"}, wantErr: "--auth none is only allowed when every listener is on loopback"},
		{name: "auth none with an empty host (HTTP)", args: []string{"--http-addr", ":8080"}, wantErr: `--http-addr is ":8080"`},
		{name: "auth none on a named host from env", env: map[string]string{"MESSAGEHUB_HTTP_ADDR": "example.org:8080"}, wantErr: "refusing to start"},
		{name: "jwt without its settings", args: []string{"--auth", "jwt"}, wantErr: "--jwks-file, --jwt-issuer, --jwt-audience"},
		{name: "jwt without an audience", args: []string{"--auth", "jwt", "--jwks-file", "k", "--jwt-issuer", "i"}, wantErr: "needs --jwt-audience"},
		// Settings for a mode not chosen: the hub would serve without
		// authentication while the operator believes tokens are checked.
		{name: "jwt settings without --auth jwt", args: []string{"--jwks-file", "k", "--jwt-issuer", "i", "--jwt-audience", "a"}, wantErr: "--jwks-file, --jwt-issuer, --jwt-audience are for --auth jwt"},
		{name: "a JWKS file from env with auth none", env: map[string]string{"MESSAGEHUB_AUTH": "none", "MESSAGEHUB_JWKS_FILE": "k"}, wantErr: "--jwks-file is for --auth jwt"},
		{name: "a certificate without a key", args: []string{"--tls-cert", "c.pem"}, wantErr: "--tls-cert and --tls-key"},
		{name: "a key without a certificate", env: map[string]string{"MESSAGEHUB_TLS_KEY": "k.pem"}, wantErr: "--tls-cert and --tls-key"},
		{name: "a content provider of no domain", args: []string{"--content-provider", "DOMAIN_WEATHER=w:1"}, wantErr: `"DOMAIN_WEATHER" is not a domain`},
		{name: "a content provider without address", args: []string{"--content-provider", "DOMAIN_CHARGES="}, wantErr: "DOMAIN=ADDRESS"},
		{name: "two providers of a domain", args: []string{"--content-provider", "DOMAIN_CHARGES=a:1", "--content-provider", "DOMAIN_CHARGES=b:1"}, wantErr: "two providers"},
		{name: "the unspecified domain", env: map[string]string{"MESSAGEHUB_CONTENT_PROVIDERS": "DOMAIN_UNSPECIFIED=a:1"}, wantErr: "MESSAGEHUB_CONTENT_PROVIDERS"},
		{name: "auth none with metrics on every interface", args: []string{"--metrics-addr", "0.0.0.0:9090"}, wantErr: `--metrics-addr is "0.0.0.0:9090"`},
		// A listen address net.Listen cannot take is the flag's mistake,
		// said before anything is opened: not a listener off loopback, nor
		// a failed listen after the start (exit 1).
		{name: "a loopback listen address without a port", args: []string{"--metrics-addr", "127.0.0.1"}, wantErr: `--metrics-addr: must be host:port`},
		{name: "a listen address without a port (jwt)", args: []string{"--auth", "jwt", "--jwks-file", "k", "--jwt-issuer", "i", "--jwt-audience", "a", "--grpc-addr", "0.0.0.0"}, wantErr: `--grpc-addr: must be host:port`},
		{name: "a listen port out of range", args: []string{"--http-addr", "127.0.0.1:99999"}, wantErr: `--http-addr: must be host:port`},
		{name: "a listen port out of range from env", env: map[string]string{"MESSAGEHUB_GRPC_ADDR": "127.0.0.1:-1"}, wantErr: `MESSAGEHUB_GRPC_ADDR: must be host:port`},
		{name: "a free-disk size without a number", args: []string{"--min-free-disk", "GiB"}, wantErr: "not a size"},
		{name: "a free-disk size in an unknown unit", env: map[string]string{"MESSAGEHUB_MIN_FREE_DISK": "3 parsecs"}, wantErr: "MESSAGEHUB_MIN_FREE_DISK"},
		{name: "a body memory below 1MiB", args: []string{"--http-max-body-memory", "1000"}, wantErr: "--http-max-body-memory"},
		{name: "a body memory that is no size", env: map[string]string{"MESSAGEHUB_HTTP_MAX_BODY_MEMORY": "lots"}, wantErr: "MESSAGEHUB_HTTP_MAX_BODY_MEMORY"},
		{name: "a save memory below 1MiB", args: []string{"--grpc-max-save-memory", "512KiB"}, wantErr: "--grpc-max-save-memory"},
		{name: "a save memory over 1TiB", env: map[string]string{"MESSAGEHUB_GRPC_MAX_SAVE_MEMORY": "2TiB"}, wantErr: "MESSAGEHUB_GRPC_MAX_SAVE_MEMORY"},
		{name: "a build memory below 1MiB", args: []string{"--content-max-build-memory", "512KiB"}, wantErr: "--content-max-build-memory"},
		{name: "zero max connections", args: []string{"--max-connections", "0"}, wantErr: "positive integer"},
		{name: "zero gRPC streams", env: map[string]string{"MESSAGEHUB_GRPC_MAX_STREAMS": "0"}, wantErr: "MESSAGEHUB_GRPC_MAX_STREAMS"},
		{name: "a negative read timeout", args: []string{"--http-read-timeout", "-1s"}, wantErr: "--http-read-timeout"},
		{name: "a zero content timeout", args: []string{"--content-timeout", "0s"}, wantErr: "positive duration"},
		{name: "a provider token in the clear", args: []string{"--content-provider-token-file", "t"}, wantErr: "never sent in the clear"},
		{name: "a provider client certificate without key", args: []string{"--content-provider-tls=true", "--content-provider-cert", "c.pem"}, wantErr: "--content-provider-cert and --content-provider-key"},
		{name: "content providers on cosmos without blob storage", args: []string{"--store", "cosmos", "--cosmos-endpoint", "https://a/", "--content-provider", "DOMAIN_CHARGES=a:1"}, wantErr: "needs --content-blob-connection-string or --content-blob-url"},
		{name: "two ways to blob storage", args: []string{"--store", "cosmos", "--cosmos-endpoint", "https://a/", "--content-blob-url", "https://b/", "--content-blob-connection-string", "x"}, wantErr: "not both"},
		{name: "blob storage with the embedded store", args: []string{"--content-blob-url", "https://b/"}, wantErr: "for --store cosmos"},
		// The SDKs take any string and fail its first request, after the
		// listeners are open (exit 1), without naming the flag.
		{name: "a cosmos endpoint without its scheme", args: []string{"--store", "cosmos", "--cosmos-endpoint", "account.documents.azure.com"}, wantErr: "--cosmos-endpoint: must be an http(s) URL"},
		{name: "a cosmos endpoint of another scheme", env: map[string]string{"MESSAGEHUB_STORE": "cosmos", "MESSAGEHUB_COSMOS_ENDPOINT": "ftp://account/"}, wantErr: "MESSAGEHUB_COSMOS_ENDPOINT: must be an http(s) URL"},
		{name: "a blob service URL without its scheme", args: []string{"--store", "cosmos", "--cosmos-endpoint", "https://a/", "--content-blob-url", "account.blob.core.windows.net"}, wantErr: "--content-blob-url: must be an http(s) URL"},
		{name: "a content lease under a second", args: []string{"--content-lease", "500ms"}, wantErr: "between 1s and"},
		{name: "a content lease over its document's int32 ttl", args: []string{"--content-lease", (cosmos.MaxBuildLease + time.Second).String()}, wantErr: "between 1s and"},
		{name: "a retention over a dequeued bundle's int32 ttl", args: []string{"--retention", (cosmos.MaxRetention + time.Second).String()}, wantErr: "between 1s and"},
		{name: "a blob container name too short", args: []string{"--content-blob-container", "ab"}, wantErr: "3 to 63"},
		// Azure refuses these names only when the container is first used.
		{name: "a blob container name in upper case", args: []string{"--content-blob-container", "Documents"}, wantErr: "lowercase letters, digits and single hyphens"},
		{name: "a blob container name with two hyphens", args: []string{"--content-blob-container", "my--docs"}, wantErr: "lowercase letters, digits and single hyphens"},
		{name: "a blob container name ending in a hyphen", env: map[string]string{"MESSAGEHUB_CONTENT_BLOB_CONTAINER": "docs-"}, wantErr: "MESSAGEHUB_CONTENT_BLOB_CONTAINER"},
		{name: "a blob container name with an underscore", args: []string{"--content-blob-container", "my_docs"}, wantErr: "lowercase letters, digits and single hyphens"},
		// gRPC takes such addresses at start and fails the first call.
		{name: "a content provider of an unknown scheme", args: []string{"--content-provider", "DOMAIN_TIME_SERIES=unknownscheme://x"}, wantErr: `"unknownscheme"`},
		{name: "a content provider of no URL", args: []string{"--content-provider", "DOMAIN_TIME_SERIES=dns:///%zz"}, wantErr: "DOMAIN_TIME_SERIES"},
		// The answer of a Peek that waited, or of a content peek that
		// waited for its document, came after the write timeout: the
		// client got a broken connection instead.
		{name: "a write timeout shorter than a Peek's wait", args: []string{"--http-write-timeout", "10s"}, wantErr: "--http-write-timeout"},
		{name: "a content timeout as long as the write timeout", args: []string{"--content-timeout", "2m"}, wantErr: "--content-timeout"},
		// A content peek's timeout counts from the end of its wait: one
		// that waited 30 s for its bundle answers up to --content-timeout
		// after that.
		{name: "a content peek's longest wait and its content timeout over the write timeout",
			args: []string{"--http-write-timeout", "40s", "--content-timeout", "25s"}, wantErr: "--content-timeout"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := ParseConfig(tt.args, envOf(tt.env), io.Discard)
			if err == nil {
				t.Fatal("ParseConfig accepted it")
			}
			if !strings.Contains(err.Error(), tt.wantErr) {
				t.Errorf("error %q does not mention %q", err, tt.wantErr)
			}
		})
	}
}

// The longest retention and content lease are taken: the Cosmos DB store
// writes their ttls (cosmos.MaxRetention, cosmos.MaxBuildLease).
func TestTheLongestRetentionAndContentLeaseAreTaken(t *testing.T) {
	cfg, err := ParseConfig([]string{"--retention", cosmos.MaxRetention.String(), "--content-lease", cosmos.MaxBuildLease.String()}, envOf(nil), io.Discard)
	if err != nil || cfg.Retention != cosmos.MaxRetention || cfg.Content.Lease != cosmos.MaxBuildLease {
		t.Fatalf("got a retention of %s and a lease of %s (%v)", cfg.Retention, cfg.Content.Lease, err)
	}
}

func TestMetricsAddrAndMinFreeDiskAreRead(t *testing.T) {
	cfg, err := ParseConfig([]string{"--metrics-addr", "127.0.0.1:9090", "--min-free-disk", "512MiB"}, envOf(nil), io.Discard)
	if err != nil || cfg.MetricsAddr != "127.0.0.1:9090" || cfg.MinFreeDisk != 512<<20 {
		t.Fatalf("got %q, %d, %v; want 127.0.0.1:9090 and 512 MiB", cfg.MetricsAddr, cfg.MinFreeDisk, err)
	}
	cfg, err = ParseConfig(nil, envOf(map[string]string{"MESSAGEHUB_MIN_FREE_DISK": "2GB"}), io.Discard)
	if err != nil || cfg.MinFreeDisk != 2e9 {
		t.Fatalf("from env: %d, %v; want 2e9", cfg.MinFreeDisk, err)
	}
}

func TestVersionFlagAsksForTheVersion(t *testing.T) {
	if _, err := ParseConfig([]string{"--version"}, envOf(nil), io.Discard); !errors.Is(err, ErrVersion) {
		t.Fatalf("--version: %v; want ErrVersion", err)
	}
}

func TestParseConfigHelpIsNotAnError(t *testing.T) {
	var out strings.Builder
	_, err := ParseConfig([]string{"-h"}, envOf(nil), &out)
	if !errors.Is(err, flag.ErrHelp) {
		t.Fatalf("got %v, want flag.ErrHelp", err)
	}
	for _, name := range []string{"grpc-addr", "MESSAGEHUB_GRPC_ADDR", "http-addr", "auth", "jwks-file", "tls-cert", "data-dir", "max-bundle-weight", "retention", "log-level"} {
		if !strings.Contains(out.String(), name) {
			t.Errorf("usage does not mention %s:\n%s", name, out.String())
		}
	}
}

func TestParseConfigCosmos(t *testing.T) {
	env := map[string]string{
		"MESSAGEHUB_STORE":             "cosmos",
		"MESSAGEHUB_COSMOS_ENDPOINT":   "https://acct.documents.azure.com:443/",
		"MESSAGEHUB_COSMOS_KEY":        "secret",
		"MESSAGEHUB_COSMOS_PROVISION":  "false",
		"MESSAGEHUB_COSMOS_ID_BUCKETS": "64",
		"MESSAGEHUB_COSMOS_THROUGHPUT": "manual=400",
	}
	cfg, err := ParseConfig([]string{"--cosmos-database", "hub"}, envOf(env), io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	want := CosmosConfig{Endpoint: "https://acct.documents.azure.com:443/", Key: "secret", Database: "hub", Provision: false, IDBuckets: 64, Throughput: "manual=400"}
	if cfg.Store != StoreCosmos || cfg.Cosmos != want {
		t.Fatalf("got store %q, %+v; want %+v", cfg.Store, cfg.Cosmos, want)
	}
	defaults, err := ParseConfig(nil, envOf(nil), io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	if d := defaults.Cosmos; d.Database != "messagehub" || !d.Provision || d.IDBuckets != 4 {
		t.Fatalf("cosmos defaults %+v", d)
	}
}

// The Cosmos DB key can come from a file (a mounted secret) rather than the
// command line, once.
func TestTheCosmosKeyComesFromAFile(t *testing.T) {
	file := filepath.Join(t.TempDir(), "key")
	if err := os.WriteFile(file, []byte("secret\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	env := envOf(map[string]string{"MESSAGEHUB_STORE": "cosmos", "MESSAGEHUB_COSMOS_ENDPOINT": "https://acct.documents.azure.com:443/"})
	cfg, err := ParseConfig([]string{"--cosmos-key-file", file}, env, io.Discard)
	if err != nil || cfg.Cosmos.Key != "secret" {
		t.Fatalf("key %q, %v; want the file's", cfg.Cosmos.Key, err)
	}
	if _, err := ParseConfig([]string{"--cosmos-key-file", file, "--cosmos-key", "other"}, env, io.Discard); err == nil || !strings.Contains(err.Error(), "once") {
		t.Fatalf("a key given twice: %v", err)
	}
	empty := filepath.Join(t.TempDir(), "empty")
	if err := os.WriteFile(empty, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := ParseConfig([]string{"--cosmos-key-file", empty}, env, io.Discard); err == nil || !strings.Contains(err.Error(), "holds no key") {
		t.Fatalf("an empty key file: %v", err)
	}
}

func TestContentProvidersComeFromRepeatedFlagsOrACommaList(t *testing.T) {
	want := map[domain.Origin]string{domain.OriginTimeSeries: "ts:50061", domain.OriginCharges: "dns:///charges:443"}
	for name, parse := range map[string]func() (Config, error){
		"repeated flags": func() (Config, error) {
			return ParseConfig([]string{"--content-provider", "DOMAIN_TIME_SERIES=ts:50061", "--content-provider=DOMAIN_CHARGES=dns:///charges:443"}, envOf(nil), io.Discard)
		},
		"a comma list in the environment": func() (Config, error) {
			return ParseConfig(nil, envOf(map[string]string{"MESSAGEHUB_CONTENT_PROVIDERS": "DOMAIN_TIME_SERIES=ts:50061, DOMAIN_CHARGES=dns:///charges:443"}), io.Discard)
		},
	} {
		cfg, err := parse()
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		if !reflect.DeepEqual(cfg.Content.Providers, want) {
			t.Errorf("%s: providers %v, want %v", name, cfg.Content.Providers, want)
		}
	}
}

// The addresses gRPC dials are taken as they are: host:port (resolved by
// DNS), a target of a scheme gRPC knows, an IPv6 literal.
func TestContentProvidersTakeEveryGRPCTarget(t *testing.T) {
	for _, target := range []string{
		"ts:50061", "ts", "10.0.0.7:50061", "[::1]:50061", "dns:///ts:50061", "dns:ts:50061",
		"unix:///run/ts.sock", "unix:run/ts.sock", "passthrough:///ts:50061", "ts.example.org:443",
	} {
		cfg, err := ParseConfig([]string{"--content-provider", "DOMAIN_TIME_SERIES=" + target}, envOf(nil), io.Discard)
		if err != nil {
			t.Errorf("%s: %v", target, err)
			continue
		}
		if got := cfg.Content.Providers[domain.OriginTimeSeries]; got != target {
			t.Errorf("%s: provider %q", target, got)
		}
	}
}

func TestContentProvidersOnCosmosTakeBlobStorageFromFlagsOrEnv(t *testing.T) {
	cfg, err := ParseConfig([]string{"--store", "cosmos", "--cosmos-endpoint", "https://a/", "--content-provider", "DOMAIN_CHARGES=c:1", "--content-blob-container", "docs"},
		envOf(map[string]string{"MESSAGEHUB_CONTENT_BLOB_CONNECTION_STRING": "UseDevelopmentStorage=true"}), io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	if want := (BlobConfig{ConnectionString: "UseDevelopmentStorage=true", Container: "docs"}); cfg.Content.Blob != want {
		t.Fatalf("blob %+v, want %+v", cfg.Content.Blob, want)
	}
}

// What a listener was bound to is checked again after listening, since a name
// such as "localhost" might not resolve to loopback. The addresses are made
// up: a test binds nothing off loopback.
func TestCheckBoundRefusesAListenerOffLoopbackOnlyWithAuthNone(t *testing.T) {
	tests := []struct {
		name    string
		auth    string
		bound   net.Addr
		refused bool
	}{
		{"auth none on 127.0.0.1", AuthNone, &net.TCPAddr{IP: net.IPv4(127, 0, 0, 1), Port: 50051}, false},
		{"auth none on ::1", AuthNone, &net.TCPAddr{IP: net.IPv6loopback, Port: 50051}, false},
		{"auth none on every IPv4 interface", AuthNone, &net.TCPAddr{IP: net.IPv4zero, Port: 50051}, true},
		{"auth none on every IPv6 interface", AuthNone, &net.TCPAddr{IP: net.IPv6unspecified, Port: 50051}, true},
		{"auth none on another host's address", AuthNone, &net.TCPAddr{IP: net.IPv4(10, 0, 0, 7), Port: 50051}, true},
		{"auth none on a socket that is not TCP", AuthNone, &net.UnixAddr{Name: "/tmp/hub.sock", Net: "unix"}, true},
		{"auth jwt on every interface", AuthJWT, &net.TCPAddr{IP: net.IPv4zero, Port: 50051}, false},
		{"auth jwt on another host's address", AuthJWT, &net.TCPAddr{IP: net.IPv4(10, 0, 0, 7), Port: 50051}, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			err := checkBound(tt.auth, tt.bound)
			if got := err != nil; got != tt.refused {
				t.Fatalf("checkBound(%s, %s) = %v, want refused %v", tt.auth, tt.bound, err, tt.refused)
			}
			if tt.refused && !strings.Contains(err.Error(), tt.bound.String()) {
				t.Errorf("the refusal does not name what was bound: %v", err)
			}
		})
	}
}

// A boolean setting's flag stands alone, as the docs and the hub's own
// errors write it ("add --cosmos-id-buckets-migrate"), wherever it is on
// the command line; a value given (=false, or after a space as the other
// flags take theirs) is still read.
func TestBooleanFlagsStandAlone(t *testing.T) {
	base := []string{"--store", "cosmos", "--cosmos-endpoint", "https://acct.documents.azure.com:443/", "--cosmos-key", "k"}
	cfg, err := ParseConfig(append([]string{"--cosmos-id-buckets-migrate", "--cosmos-id-buckets", "8"}, append(base, "--cosmos-provision=false")...), envOf(nil), io.Discard)
	if err != nil {
		t.Fatalf("--cosmos-id-buckets-migrate before another flag: %v", err)
	}
	if !cfg.Cosmos.MigrateIDBuckets || cfg.Cosmos.IDBuckets != 8 || cfg.Cosmos.Provision {
		t.Fatalf("got %+v; want the migration to 8 buckets, without provisioning", cfg.Cosmos)
	}
	cfg, err = ParseConfig(append(base, "--cosmos-id-buckets-migrate"), envOf(nil), io.Discard)
	if err != nil || !cfg.Cosmos.MigrateIDBuckets {
		t.Fatalf("--cosmos-id-buckets-migrate last: %v, %+v", err, cfg.Cosmos)
	}
	cfg, err = ParseConfig([]string{"--content-provider-tls", "--content-provider", "DOMAIN_TIME_SERIES=ts:50061"}, envOf(nil), io.Discard)
	if err != nil || !cfg.Content.TLS {
		t.Fatalf("--content-provider-tls before --content-provider: %v, %+v", err, cfg.Content)
	}
	cfg, err = ParseConfig(append([]string{"--cosmos-provision", "false", "--cosmos-id-buckets-migrate", "true"}, base...), envOf(nil), io.Discard)
	if err != nil || cfg.Cosmos.Provision || !cfg.Cosmos.MigrateIDBuckets {
		t.Fatalf("--cosmos-provision false --cosmos-id-buckets-migrate true: %v, %+v", err, cfg.Cosmos)
	}
	if _, err := ParseConfig(append(base, "--cosmos-provision", "maybe"), envOf(nil), io.Discard); err == nil || !strings.Contains(err.Error(), `--cosmos-provision: not a boolean: "maybe"`) {
		t.Fatalf("--cosmos-provision maybe: %v; want it refused as not a boolean", err)
	}
	var usage strings.Builder
	_, _ = ParseConfig([]string{"-h"}, envOf(nil), &usage)
	for _, name := range []string{"cosmos-provision", "cosmos-id-buckets-migrate", "content-provider-tls"} {
		if strings.Contains(usage.String(), "-"+name+" string") {
			t.Errorf("usage shows --%s as taking a string:\n%s", name, usage.String())
		}
	}
}
