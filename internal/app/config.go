package app

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/url"
	"os"
	"strconv"
	"strings"
	"time"

	"github.com/energydatahub/messagehub/internal/audit"
	"github.com/energydatahub/messagehub/internal/content/blobstore"
	"github.com/energydatahub/messagehub/internal/diskguard"
	"github.com/energydatahub/messagehub/internal/domain"
	"github.com/energydatahub/messagehub/internal/server"
	"github.com/energydatahub/messagehub/internal/store/cosmos"
)

// Config is everything the hub is configured with. ParseConfig fills the
// settings, each from a flag, else from its environment variable, else from
// its default; the fields after Limits are set by the caller.
type Config struct {
	GRPCAddr        string        // address the gRPC server listens on
	HTTPAddr        string        // address the HTTP gateway listens on
	MetricsAddr     string        // address /metrics is served on; empty: the HTTP gateway's
	Auth            string        // AuthNone or AuthJWT
	JWKSFile        string        // with AuthJWT: the keys tokens are signed with
	JWTIssuer       string        // with AuthJWT: the iss tokens must carry
	JWTAudience     string        // with AuthJWT: the aud tokens must carry
	JWTActorClaim   string        // with AuthJWT: the claim holding the actor id
	TLSCert         string        // PEM certificate (chain) of every listener; empty: plaintext
	TLSKey          string        // PEM private key of TLSCert
	Store           string        // store backend: StoreEmbedded or StoreCosmos
	DataDir         string        // folder of the embedded store
	MinFreeDisk     uint64        // saves are refused while the data volume has less free; 0: never
	Cosmos          CosmosConfig  // with StoreCosmos
	MaxBundleWeight int64         // largest total weight of a bundle (≥ 1)
	Retention       time.Duration // how long acknowledged data is kept (> 0)
	LogLevel        slog.Level    // minimum level logged
	Content         ContentConfig // bundles' documents
	ContentTimeout  time.Duration // how long a PeekContent waits for a document
	Limits          Limits        // what clients can make the process hold

	// Logger receives the hub's logs; nil discards them.
	Logger *slog.Logger
	// Build names the running build, in the logs and in
	// messagehub_build_info.
	Build Build
	// ShutdownTimeout bounds shutdown, from its start (Run's context ending,
	// or Close) until Close returns; 0 means DefaultShutdownTimeout.
	ShutdownTimeout time.Duration

	// wrapStore, when set, wraps the store under everything else: tests use
	// it to make the store misbehave.
	wrapStore storeWrapper
	// auditOptions, when set, replace the audit log's defaults (tests).
	auditOptions audit.Options
	// waitRecheck, when set, is how often a waiting Peek on a shared store
	// looks again by itself instead of server.DefaultWaitRecheck (tests:
	// an hour, so that only a bell can wake it).
	waitRecheck time.Duration
}

// Build is what the binary knows about how it was built.
type Build struct {
	Version   string // module version; empty: "(devel)"
	Revision  string // VCS commit; empty: "unknown"
	GoVersion string
}

// Limits bound the resources clients can tie up.
type Limits struct {
	HTTPReadTimeout  time.Duration // whole request, body included
	HTTPWriteTimeout time.Duration // whole response
	HTTPIdleTimeout  time.Duration // between requests on a kept-alive connection
	HTTPBodyMemory   int64         // bytes of request bodies all HTTP requests together may have in flight
	MaxConnections   int           // open connections per listener
	GRPCMaxStreams   uint32        // concurrent calls per gRPC connection
	GRPCMaxConnAge   time.Duration // gRPC connections are closed (gracefully) after this long
	GRPCHandshake    time.Duration // longest a new gRPC connection may take to complete its handshake
	GRPCSaveMemory   int64         // bytes of Save requests the gRPC server holds at once
}

// Store backends.
const (
	StoreEmbedded = "embedded" // the default: pebble in --data-dir
	StoreCosmos   = "cosmos"   // Azure Cosmos DB, shared by several instances
)

// CosmosConfig is where the Cosmos DB store is.
type CosmosConfig struct {
	Endpoint  string // account endpoint, e.g. https://account.documents.azure.com:443/
	Key       string // account key; empty: Azure AD (azidentity's default chain)
	Database  string // created with its containers when Provision is set
	Provision bool
	IDBuckets int // partitions of the id index
	// MigrateIDBuckets lets a database whose id index has another count
	// move to IDBuckets (docs/cosmos.md, "The id index").
	MigrateIDBuckets bool
	// Throughput of each container created by provisioning:
	// autoscale=<max RU/s>, manual=<RU/s> or serverless.
	Throughput string
}

// Authentication modes.
const (
	AuthNone = "none" // no authentication: only allowed on loopback listeners
	AuthJWT  = "jwt"  // bearer JWTs checked against a JWKS file
)

// setting describes one configuration value: its flag, its environment
// variable, its default and how it is stored into Config.
type setting struct {
	flag, env, def, usage string
	set                   func(c *Config, v string) error
}

// listFlags may be repeated: their values are joined with commas, the form
// their environment variables take.
var listFlags = map[string]bool{"content-provider": true}

// boolFlags are switches: the flag alone turns the setting on
// (--cosmos-id-buckets-migrate, as the docs and the hub's errors write it),
// and a value may still follow, after '=' or a space (boolValues).
var boolFlags = map[string]bool{"cosmos-provision": true, "cosmos-id-buckets-migrate": true, "content-provider-tls": true}

// switchValue is a boolean setting's flag: the flag package sets it to
// "true" when it stands alone; the value is checked with the others'.
type switchValue struct{ v *string }

func (s switchValue) String() string {
	if s.v == nil { // the flag package's zero value, for its usage text
		return ""
	}
	return *s.v
}

func (s switchValue) Set(v string) error { *s.v = v; return nil }

func (switchValue) IsBoolFlag() bool { return true }

// boolValues joins a switch and the value after it (--cosmos-provision
// false) into one argument, as the flag package reads a bool flag's value
// only after '='. The hub takes no other arguments, so a word after a
// switch that is not a flag can only be its value.
func boolValues(args []string) []string {
	out := make([]string, 0, len(args))
	for i := 0; i < len(args); i++ {
		arg := args[i]
		if arg == "--" {
			return append(out, args[i:]...)
		}
		name := strings.TrimLeft(arg, "-")
		if arg != name && boolFlags[name] && i+1 < len(args) && !strings.HasPrefix(args[i+1], "-") {
			arg, i = arg+"="+args[i+1], i+1
		}
		out = append(out, arg)
	}
	return out
}

var settings = []setting{
	{"grpc-addr", "MESSAGEHUB_GRPC_ADDR", "127.0.0.1:50051", "address the gRPC server listens on (port 0 picks a free one)",
		func(c *Config, v string) error { return listenAddress(v, &c.GRPCAddr) }},
	{"http-addr", "MESSAGEHUB_HTTP_ADDR", "127.0.0.1:8080", "address the HTTP gateway (/v1, /openapi.json, /healthz, /metrics) listens on (port 0 picks a free one)",
		func(c *Config, v string) error { return listenAddress(v, &c.HTTPAddr) }},
	{"metrics-addr", "MESSAGEHUB_METRICS_ADDR", "", "address of a listener of its own for /metrics (e.g. an internal interface); empty: /metrics is on the HTTP gateway",
		func(c *Config, v string) error {
			if v == "" {
				return nil
			}
			return listenAddress(v, &c.MetricsAddr)
		}},
	{"auth", "MESSAGEHUB_AUTH", AuthNone, "authentication: none (only when every listener is on loopback) or jwt",
		func(c *Config, v string) error {
			if v != AuthNone && v != AuthJWT {
				return fmt.Errorf("must be %q or %q, got %q", AuthNone, AuthJWT, v)
			}
			c.Auth = v
			return nil
		}},
	{"jwks-file", "MESSAGEHUB_JWKS_FILE", "", "with --auth jwt: JWKS file of the RS256/ES256 keys tokens are signed with",
		func(c *Config, v string) error { c.JWKSFile = v; return nil }},
	{"jwt-issuer", "MESSAGEHUB_JWT_ISSUER", "", "with --auth jwt: the iss claim tokens must carry",
		func(c *Config, v string) error { c.JWTIssuer = v; return nil }},
	{"jwt-audience", "MESSAGEHUB_JWT_AUDIENCE", "", "with --auth jwt: the aud claim tokens must carry",
		func(c *Config, v string) error { c.JWTAudience = v; return nil }},
	{"jwt-actor-claim", "MESSAGEHUB_JWT_ACTOR_CLAIM", "sub", "with --auth jwt: the claim holding the caller's actor id (a UUID)",
		func(c *Config, v string) error { return nonEmpty(v, &c.JWTActorClaim) }},
	{"tls-cert", "MESSAGEHUB_TLS_CERT", "", "PEM certificate of the gRPC and HTTP listeners (with --tls-key); empty: plaintext",
		func(c *Config, v string) error { c.TLSCert = v; return nil }},
	{"tls-key", "MESSAGEHUB_TLS_KEY", "", "PEM private key of --tls-cert",
		func(c *Config, v string) error { c.TLSKey = v; return nil }},
	{"store", "MESSAGEHUB_STORE", StoreEmbedded, "store backend: embedded or cosmos",
		func(c *Config, v string) error {
			if v != StoreEmbedded && v != StoreCosmos {
				return fmt.Errorf("store %q is not supported: use %q or %q", v, StoreEmbedded, StoreCosmos)
			}
			c.Store = v
			return nil
		}},
	{"cosmos-endpoint", "MESSAGEHUB_COSMOS_ENDPOINT", "", "Cosmos DB account endpoint (with --store cosmos)",
		func(c *Config, v string) error { return serviceURL(v, &c.Cosmos.Endpoint) }},
	{"cosmos-key", "MESSAGEHUB_COSMOS_KEY", "", "Cosmos DB account key; empty: Azure AD through the default credential chain",
		func(c *Config, v string) error { c.Cosmos.Key = v; return nil }},
	// A key on the command line is visible to every user of the machine;
	// a file (a mounted secret) is not.
	{"cosmos-key-file", "MESSAGEHUB_COSMOS_KEY_FILE", "", "file holding the Cosmos DB account key (a mounted secret), instead of --cosmos-key",
		func(c *Config, v string) error {
			if v == "" {
				return nil
			}
			if c.Cosmos.Key != "" {
				return errors.New("give the key once: --cosmos-key or --cosmos-key-file")
			}
			key, err := os.ReadFile(v) //nolint:gosec // the operator names the file
			if err != nil {
				return err
			}
			if c.Cosmos.Key = strings.TrimSpace(string(key)); c.Cosmos.Key == "" {
				return fmt.Errorf("%s holds no key", v)
			}
			return nil
		}},
	{"cosmos-database", "MESSAGEHUB_COSMOS_DATABASE", "messagehub", "Cosmos DB database",
		func(c *Config, v string) error { return nonEmpty(v, &c.Cosmos.Database) }},
	{"cosmos-provision", "MESSAGEHUB_COSMOS_PROVISION", "true", "create the Cosmos DB database and containers when missing",
		func(c *Config, v string) error { return boolean(v, &c.Cosmos.Provision) }},
	{"cosmos-id-buckets", "MESSAGEHUB_COSMOS_ID_BUCKETS", strconv.Itoa(defaultCosmosIDBuckets), "partitions of the Cosmos DB id index (1..256)",
		func(c *Config, v string) error {
			n, err := strconv.Atoi(v)
			if err != nil || n < 1 || n > 256 {
				return fmt.Errorf("must be an integer in 1..256, got %q", v)
			}
			c.Cosmos.IDBuckets = n
			return nil
		}},
	{"cosmos-id-buckets-migrate", "MESSAGEHUB_COSMOS_ID_BUCKETS_MIGRATE", "false",
		"move a database whose Cosmos DB id index has another bucket count to --cosmos-id-buckets, keeping duplicates found",
		func(c *Config, v string) error { return boolean(v, &c.Cosmos.MigrateIDBuckets) }},
	{"cosmos-throughput", "MESSAGEHUB_COSMOS_THROUGHPUT", defaultCosmosThroughput,
		"request units of each Cosmos DB container created: autoscale=<max RU/s>, manual=<RU/s> or serverless",
		func(c *Config, v string) error {
			if err := validateCosmosThroughput(v); err != nil {
				return err
			}
			c.Cosmos.Throughput = v
			return nil
		}},
	{"data-dir", "MESSAGEHUB_DATA_DIR", "./data", "folder of the embedded store (created if missing)",
		func(c *Config, v string) error { return nonEmpty(v, &c.DataDir) }},
	{"min-free-disk", "MESSAGEHUB_MIN_FREE_DISK", "1GiB", "free space kept on the embedded store's volume, less than its size: below it saves are refused (RESOURCE_EXHAUSTED) until space is freed; 0 turns the guard off",
		func(c *Config, v string) error {
			n, err := diskguard.ParseSize(v)
			c.MinFreeDisk = n
			return err
		}},
	{"max-bundle-weight", "MESSAGEHUB_MAX_BUNDLE_WEIGHT", strconv.Itoa(domain.DefaultMaxBundleWeight), "largest total weight of a bundle (1 to 200000)",
		func(c *Config, v string) error {
			n, err := strconv.ParseInt(v, 10, 64)
			if err != nil {
				return fmt.Errorf("not an integer: %q", v)
			}
			if n < 1 || n > domain.HighestMaxBundleWeight {
				return fmt.Errorf("must be between 1 and %d (the largest bundle a Peek's answer holds), got %d", domain.HighestMaxBundleWeight, n)
			}
			c.MaxBundleWeight = n
			return nil
		}},
	{"retention", "MESSAGEHUB_RETENTION", "168h", "how long acknowledged notifications and dequeued bundles are kept (Go duration, e.g. 168h)",
		func(c *Config, v string) error {
			d, err := time.ParseDuration(v)
			if err != nil {
				return fmt.Errorf("not a duration: %q", v)
			}
			// Cosmos DB keeps it as a TTL in whole seconds, an int32, with
			// a margin for dequeued bundles (cosmos.MaxRetention).
			if d < time.Second || d > cosmos.MaxRetention {
				return fmt.Errorf("must be between 1s and %s, got %s", cosmos.MaxRetention, d)
			}
			c.Retention = d
			return nil
		}},
	{"content-provider", "MESSAGEHUB_CONTENT_PROVIDERS", "",
		"DOMAIN=ADDRESS of a domain's BundleContentProvider (gRPC target), e.g. DOMAIN_TIME_SERIES=ts:50061; repeat the flag, or separate with commas",
		func(c *Config, v string) error {
			providers, err := parseProviders(v)
			c.Content.Providers = providers
			return err
		}},
	{"content-timeout", "MESSAGEHUB_CONTENT_TIMEOUT", "25s", "how long a content peek waits for its document before answering UNAVAILABLE (the build goes on)",
		func(c *Config, v string) error { return positiveDuration(v, &c.ContentTimeout) }},
	{"content-provider-tls", "MESSAGEHUB_CONTENT_PROVIDER_TLS", "false", "dial content providers with TLS",
		func(c *Config, v string) error { return boolean(v, &c.Content.TLS) }},
	{"content-provider-ca", "MESSAGEHUB_CONTENT_PROVIDER_CA", "", "PEM roots that content providers' certificates must chain to; empty: the system's",
		func(c *Config, v string) error { c.Content.CAFile = v; return nil }},
	{"content-provider-cert", "MESSAGEHUB_CONTENT_PROVIDER_CERT", "", "PEM client certificate presented to content providers (mTLS), with --content-provider-key",
		func(c *Config, v string) error { c.Content.CertFile = v; return nil }},
	{"content-provider-key", "MESSAGEHUB_CONTENT_PROVIDER_KEY", "", "PEM private key of --content-provider-cert",
		func(c *Config, v string) error { c.Content.KeyFile = v; return nil }},
	{"content-provider-token-file", "MESSAGEHUB_CONTENT_PROVIDER_TOKEN_FILE", "", "file holding a bearer token sent to content providers (needs --content-provider-tls)",
		func(c *Config, v string) error { c.Content.TokenFile = v; return nil }},
	{"content-blob-connection-string", "MESSAGEHUB_CONTENT_BLOB_CONNECTION_STRING", "",
		"with --store cosmos: connection string of the Azure Storage account that keeps bundles' documents (account key or SAS)",
		func(c *Config, v string) error { c.Content.Blob.ConnectionString = v; return nil }},
	{"content-blob-url", "MESSAGEHUB_CONTENT_BLOB_URL", "",
		"with --store cosmos: blob service URL of the account that keeps bundles' documents (e.g. https://ACCOUNT.blob.core.windows.net), reached with Azure AD",
		func(c *Config, v string) error { return serviceURL(v, &c.Content.Blob.URL) }},
	{"content-blob-container", "MESSAGEHUB_CONTENT_BLOB_CONTAINER", blobstore.DefaultContainer,
		"blob container of bundles' documents (created when --cosmos-provision)",
		func(c *Config, v string) error {
			if !validContainerName(v) {
				return fmt.Errorf("must be a container name of 3 to 63 characters, lowercase letters, digits and single hyphens, starting and ending with a letter or digit, got %q", v)
			}
			c.Content.Blob.Container = v
			return nil
		}},
	{"content-lease", "MESSAGEHUB_CONTENT_LEASE", "30s",
		"with --store cosmos: how long an instance holds a bundle's document build unless it renews it (every third of it); the longest a dead instance holds a build up",
		func(c *Config, v string) error {
			d, err := time.ParseDuration(v)
			// Cosmos DB removes a build's lease document by its TTL, an
			// int32 of seconds (cosmos.MaxBuildLease).
			if err != nil || d < time.Second || d > cosmos.MaxBuildLease {
				return fmt.Errorf("must be a duration between 1s and %s, got %q", cosmos.MaxBuildLease, v)
			}
			c.Content.Lease = d
			return nil
		}},
	{"content-notice-grace", "MESSAGEHUB_CONTENT_NOTICE_GRACE", "1m",
		"with --store cosmos: how old another instance's notice of a dequeue must be before this one tells the domain of it (each tells its own at once); how long a dead instance's dequeues wait",
		func(c *Config, v string) error { return positiveDuration(v, &c.Content.NoticeGrace) }},
	{"content-max-build-memory", "MESSAGEHUB_CONTENT_MAX_BUILD_MEMORY", "256MiB",
		"bytes the builds of bundles' documents running at once may hold (a build counts twice its bundle's size as long as it runs, backoffs included, and the 4MiB of a provider's chunk while it asks its domain; one larger than this runs alone); a content peek whose build does not fit is answered UNAVAILABLE without asking the domain",
		func(c *Config, v string) error { return memorySize(v, &c.Content.BuildMemory) }},
	{"http-read-timeout", "MESSAGEHUB_HTTP_READ_TIMEOUT", "60s", "longest time to read an HTTP request, body included",
		func(c *Config, v string) error { return positiveDuration(v, &c.Limits.HTTPReadTimeout) }},
	{"http-write-timeout", "MESSAGEHUB_HTTP_WRITE_TIMEOUT", "2m", "longest time to write an HTTP response, counted from the request (longer than a Peek's longest wait, 30s, plus --content-timeout)",
		func(c *Config, v string) error { return positiveDuration(v, &c.Limits.HTTPWriteTimeout) }},
	{"http-idle-timeout", "MESSAGEHUB_HTTP_IDLE_TIMEOUT", "2m", "how long an idle kept-alive HTTP connection stays open",
		func(c *Config, v string) error { return positiveDuration(v, &c.Limits.HTTPIdleTimeout) }},
	{"http-max-body-memory", "MESSAGEHUB_HTTP_MAX_BODY_MEMORY", "128MiB", "bytes of request bodies all HTTP requests together may have in flight (a body counts its Content-Length, or 33MiB when chunked); a request that does not fit is answered 503 with Retry-After",
		func(c *Config, v string) error { return memorySize(v, &c.Limits.HTTPBodyMemory) }},
	{"grpc-max-save-memory", "MESSAGEHUB_GRPC_MAX_SAVE_MEMORY", "128MiB", "bytes of Save requests the gRPC server holds at once, decoded and waiting for or in their commit (a Save counts its size plus 128 bytes a notification; one larger than this passes alone); a Save that does not fit is answered UNAVAILABLE and stores nothing",
		func(c *Config, v string) error { return memorySize(v, &c.Limits.GRPCSaveMemory) }},
	{"max-connections", "MESSAGEHUB_MAX_CONNECTIONS", "1000", "most open connections per listener (gRPC and HTTP each); a new one beyond it closes the oldest that has not sent its first bytes yet, or else waits to be accepted",
		func(c *Config, v string) error {
			n, err := strconv.Atoi(v)
			if err != nil || n < 1 {
				return fmt.Errorf("must be a positive integer, got %q", v)
			}
			c.Limits.MaxConnections = n
			return nil
		}},
	{"grpc-max-streams", "MESSAGEHUB_GRPC_MAX_STREAMS", "100", "most concurrent calls per gRPC connection",
		func(c *Config, v string) error {
			n, err := strconv.ParseUint(v, 10, 32)
			if err != nil || n < 1 {
				return fmt.Errorf("must be a positive integer, got %q", v)
			}
			c.Limits.GRPCMaxStreams = uint32(n)
			return nil
		}},
	{"grpc-handshake-timeout", "MESSAGEHUB_GRPC_HANDSHAKE_TIMEOUT", "10s", "longest a new gRPC connection may take to complete its TLS and HTTP/2 handshake before it is closed",
		func(c *Config, v string) error { return positiveDuration(v, &c.Limits.GRPCHandshake) }},
	{"grpc-max-connection-age", "MESSAGEHUB_GRPC_MAX_CONNECTION_AGE", "30m", "gRPC connections are closed gracefully after this long (clients reconnect)",
		func(c *Config, v string) error { return positiveDuration(v, &c.Limits.GRPCMaxConnAge) }},
	{"log-level", "MESSAGEHUB_LOG_LEVEL", "info", "minimum log level: debug, info, warn or error (debug-4 adds the embedded store's own lines)",
		func(c *Config, v string) error {
			var l slog.Level
			if err := l.UnmarshalText([]byte(v)); err != nil {
				return fmt.Errorf("not a log level (debug, info, warn, error): %q", v)
			}
			c.LogLevel = l
			return nil
		}},
}

// The parsers several settings share: each checks v and stores it into the
// field.

func nonEmpty(v string, into *string) error {
	if v == "" {
		return errors.New("must not be empty")
	}
	*into = v
	return nil
}

// listenAddress reads an address to listen on: host:port as net.Listen
// takes it (the port a number up to 65535, or a service's name), so that
// one it cannot take is said here, naming its flag, rather than as a
// listener off loopback or a failed start.
func listenAddress(v string, into *string) error {
	_, port, err := net.SplitHostPort(v)
	if err == nil {
		_, err = net.LookupPort("tcp", port)
	}
	if err != nil {
		return fmt.Errorf("must be host:port (e.g. 127.0.0.1:8080; port 0 picks a free one), got %q: %w", v, err)
	}
	*into = v
	return nil
}

// serviceURL reads the URL of an Azure service (empty: not given). The
// SDKs take any string and fail its first request, after the listeners are
// open, with "no Host in request URL" for an endpoint written without its
// scheme.
func serviceURL(v string, into *string) error {
	if v == "" {
		return nil
	}
	u, err := url.Parse(v)
	if err != nil || u.Scheme != "https" && u.Scheme != "http" || u.Host == "" {
		return fmt.Errorf("must be an http(s) URL (https://HOST[:PORT]/), got %q", v)
	}
	*into = v
	return nil
}

func boolean(v string, into *bool) error {
	b, err := strconv.ParseBool(v)
	if err != nil {
		return fmt.Errorf("not a boolean: %q", v)
	}
	*into = b
	return nil
}

// memorySize reads a budget of memory (the request bodies or Saves held at
// once): a size of 1MiB to 1TiB.
func memorySize(v string, into *int64) error {
	n, err := diskguard.ParseSize(v)
	if err != nil {
		return err
	}
	if n < 1<<20 || n > 1<<40 {
		return fmt.Errorf("must be between 1MiB and 1TiB, got %q", v)
	}
	*into = int64(n)
	return nil
}

func positiveDuration(v string, into *time.Duration) error {
	d, err := time.ParseDuration(v)
	if err != nil || d <= 0 {
		return fmt.Errorf("must be a positive duration, got %q", v)
	}
	*into = d
	return nil
}

// ErrVersion is ParseConfig's answer to --version: print the version and exit.
var ErrVersion = errors.New("version requested")

// ParseConfig reads the configuration from the command-line arguments (without
// the program name) and the environment (getenv). A flag beats its environment
// variable, which beats the default. Usage and errors go to output; -h returns
// flag.ErrHelp.
func ParseConfig(args []string, getenv func(string) string, output io.Writer) (Config, error) {
	fs := flag.NewFlagSet("messagehub", flag.ContinueOnError)
	fs.SetOutput(output)
	values := make([]*string, len(settings))
	for i, s := range settings {
		usage := fmt.Sprintf("%s (env %s)", s.usage, s.env)
		if boolFlags[s.flag] {
			values[i] = new(string)
			*values[i] = s.def
			fs.Var(switchValue{values[i]}, s.flag, usage)
			continue
		}
		if !listFlags[s.flag] {
			values[i] = fs.String(s.flag, s.def, usage)
			continue
		}
		joined := new(string)
		values[i] = joined
		fs.Func(s.flag, usage, func(v string) error {
			*joined = strings.Join(append(strings.Split(*joined, ","), v), ",")
			return nil
		})
	}
	showVersion := fs.Bool("version", false, "print the version, commit and build time, and exit")
	if err := fs.Parse(boolValues(args)); err != nil {
		return Config{}, err
	}
	if *showVersion {
		return Config{}, ErrVersion
	}
	if fs.NArg() > 0 {
		return Config{}, fmt.Errorf("unexpected arguments: %s", strings.Join(fs.Args(), " "))
	}
	fromFlag := map[string]bool{}
	fs.Visit(func(f *flag.Flag) { fromFlag[f.Name] = true })

	var cfg Config
	for i, s := range settings {
		v, source := *values[i], "--"+s.flag
		if !fromFlag[s.flag] {
			if e, ok := lookup(getenv, s.env); ok {
				v, source = e, s.env
			} else {
				source = "default of --" + s.flag
			}
		}
		if err := s.set(&cfg, v); err != nil {
			return Config{}, fmt.Errorf("%s: %w", source, err)
		}
	}
	if err := cfg.validate(); err != nil {
		return Config{}, err
	}
	return cfg, nil
}

// validate checks the settings that depend on each other.
func (c Config) validate() error {
	if (c.TLSCert == "") != (c.TLSKey == "") {
		return errors.New("--tls-cert and --tls-key go together: give both or neither")
	}
	// An HTTP answer is written by the write timeout, counted from the
	// request: a Peek's answer after its wait (at most server.MaxWait) and
	// a content peek's after its wait and then --content-timeout (which
	// counts from when its bundle is picked) must come before it, or their
	// clients get a broken connection instead.
	if c.Limits.HTTPWriteTimeout <= server.MaxWait {
		return fmt.Errorf("--http-write-timeout (%s) must be longer than the longest a Peek may wait (%s)", c.Limits.HTTPWriteTimeout, server.MaxWait)
	}
	if server.MaxWait+c.ContentTimeout >= c.Limits.HTTPWriteTimeout {
		return fmt.Errorf("--content-timeout (%s) must be shorter than --http-write-timeout (%s) less the longest a Peek may wait (%s): "+
			"a content peek answers when it is over, counted from the end of its wait", c.ContentTimeout, c.Limits.HTTPWriteTimeout, server.MaxWait)
	}
	if c.Store == StoreCosmos && c.Cosmos.Endpoint == "" {
		return errors.New("--store cosmos needs --cosmos-endpoint")
	}
	if err := c.Content.validate(c.Store); err != nil {
		return err
	}
	// The settings of --auth jwt: each needed with it, and a mistake
	// without it (as --content-blob-* with the embedded store): the hub
	// would take no token while its operator believes tokens are checked.
	var missing, given []string
	for _, s := range []struct{ flag, v string }{
		{"--jwks-file", c.JWKSFile}, {"--jwt-issuer", c.JWTIssuer}, {"--jwt-audience", c.JWTAudience},
	} {
		if s.v == "" {
			missing = append(missing, s.flag)
		} else {
			given = append(given, s.flag)
		}
	}
	switch c.Auth {
	case AuthJWT:
		if len(missing) > 0 {
			return fmt.Errorf("--auth jwt needs %s", strings.Join(missing, ", "))
		}
	case AuthNone:
		if len(given) == 1 {
			return fmt.Errorf("%s is for --auth jwt, and --auth is none: give --auth jwt, or leave it out", given[0])
		}
		if len(given) > 1 {
			return fmt.Errorf("%s are for --auth jwt, and --auth is none: give --auth jwt, or leave them out", strings.Join(given, ", "))
		}
		for _, l := range []struct{ flag, addr string }{{"--grpc-addr", c.GRPCAddr}, {"--http-addr", c.HTTPAddr}, {"--metrics-addr", c.MetricsAddr}} {
			if l.addr != "" && !IsLoopback(l.addr) {
				return fmt.Errorf("refusing to start: --auth none is only allowed when every listener is on loopback, "+
					"but %s is %q; listen on 127.0.0.1 or ::1, or use --auth jwt with --jwks-file, --jwt-issuer and --jwt-audience",
					l.flag, l.addr)
			}
		}
	}
	return nil
}

// IsLoopback reports whether a listen address (host:port) binds to loopback
// only: a loopback IP or "localhost". An empty host binds every interface.
func IsLoopback(addr string) bool {
	host, _, err := net.SplitHostPort(addr)
	if err != nil {
		return false
	}
	if strings.EqualFold(host, "localhost") {
		return true
	}
	ip := net.ParseIP(host)
	return ip != nil && ip.IsLoopback()
}

// lookup treats an empty variable as unset, as most deployment tools do.
func lookup(getenv func(string) string, name string) (string, bool) {
	if getenv == nil {
		return "", false
	}
	v := getenv(name)
	return v, v != ""
}

// validContainerName: Azure's rules for a container's name, which it checks
// only when the container is first used
// (https://learn.microsoft.com/rest/api/storageservices/naming-and-referencing-containers--blobs--and-metadata):
// 3 to 63 lowercase letters, digits and hyphens, a hyphen between two
// letters or digits.
func validContainerName(name string) bool {
	if len(name) < 3 || len(name) > 63 {
		return false
	}
	for i := range len(name) {
		switch c := name[i]; {
		case 'a' <= c && c <= 'z', '0' <= c && c <= '9':
		case c == '-' && i > 0 && i < len(name)-1 && name[i-1] != '-':
		default:
			return false
		}
	}
	return true
}
