package app

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"maps"
	"net/url"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/resolver"

	messagehubv1 "github.com/energydatahub/messagehub/gen/messagehub/v1"
	"github.com/energydatahub/messagehub/internal/content"
	"github.com/energydatahub/messagehub/internal/content/blobstore"
	"github.com/energydatahub/messagehub/internal/domain"
)

// ContentConfig is where bundles' documents come from (issue: bundle
// content). Without providers PeekContent serves bundles without documents.
type ContentConfig struct {
	Providers map[domain.Origin]string // domain → gRPC target of its BundleContentProvider
	TLS       bool                     // dial providers with TLS
	CAFile    string                   // PEM roots for the providers' certificates; empty: the system's
	CertFile  string                   // PEM client certificate (mTLS), with KeyFile
	KeyFile   string
	TokenFile string // a bearer token sent to providers (needs TLS)
	// Blob is where documents go with --store cosmos: Azure Blob Storage,
	// which every instance reaches.
	Blob BlobConfig
	// Lease is how long an instance holds a bundle's build unless it renews
	// it (with --store cosmos): the longest a dead instance holds one up.
	Lease time.Duration
	// NoticeGrace is how old another instance's notice must be before this
	// one tells its domain (with --store cosmos; each tells its own at
	// once): how long a dead instance's dequeues wait.
	NoticeGrace time.Duration
	// BuildMemory bounds the bytes the builds of documents running at once
	// hold (content.Options.MaxBuildMemory).
	BuildMemory int64
}

// BlobConfig is an Azure Blob Storage container: ConnectionString (account
// key or SAS, e.g. Azurite) or URL (Azure AD through the default credential
// chain).
type BlobConfig struct {
	ConnectionString string
	URL              string
	Container        string
}

// parseProviders reads "DOMAIN_X=ADDRESS" entries, comma-separated.
func parseProviders(v string) (map[domain.Origin]string, error) {
	out := map[domain.Origin]string{}
	for entry := range strings.SplitSeq(v, ",") {
		entry = strings.TrimSpace(entry)
		if entry == "" {
			continue
		}
		name, target, ok := strings.Cut(entry, "=")
		if !ok || target == "" {
			return nil, fmt.Errorf("%q is not DOMAIN=ADDRESS", entry)
		}
		n, known := messagehubv1.Domain_value[name]
		if !known || n == 0 {
			return nil, fmt.Errorf("%q is not a domain (e.g. DOMAIN_TIME_SERIES)", name)
		}
		if err := checkProviderTarget(target); err != nil {
			return nil, fmt.Errorf("%s: %w", name, err)
		}
		origin := domain.Origin(n)
		if _, twice := out[origin]; twice {
			return nil, fmt.Errorf("%s has two providers", name)
		}
		out[origin] = target
	}
	if len(out) == 0 {
		return nil, nil
	}
	return out, nil
}

// checkProviderTarget refuses an address that grpc.NewClient takes and that
// fails only when the provider is first called, or that it refuses once the
// store is open: a URL of a scheme gRPC has no resolver for, or one that is
// no URL. As for grpc.NewClient, an address without "://" is a DNS name
// (host or host:port), or of a scheme gRPC knows (e.g. unix:path).
func checkProviderTarget(target string) error {
	u, err := url.Parse(target)
	if err == nil && resolver.Get(u.Scheme) != nil {
		return nil
	}
	if !strings.Contains(target, "://") {
		return nil
	}
	if err != nil {
		return fmt.Errorf("%q is not a gRPC target (e.g. host:port, dns:///host:port, unix:///path): %w", target, err)
	}
	return fmt.Errorf("%q is not a gRPC target: gRPC has no resolver for the scheme %q (e.g. host:port, dns:///host:port, unix:///path)", target, u.Scheme)
}

func (c ContentConfig) validate(store string) error {
	if c.Blob.ConnectionString != "" && c.Blob.URL != "" {
		return errors.New("--content-blob-connection-string and --content-blob-url: give one, not both")
	}
	blob := c.Blob.ConnectionString != "" || c.Blob.URL != ""
	if store == StoreEmbedded && blob {
		return errors.New("--content-blob-* is for --store cosmos: the embedded store keeps documents on its own volume")
	}
	if store == StoreCosmos && len(c.Providers) > 0 && !blob {
		// Every instance must reach every document: not a local folder.
		return errors.New("--content-provider with --store cosmos needs --content-blob-connection-string or --content-blob-url")
	}
	if (c.CertFile == "") != (c.KeyFile == "") {
		return errors.New("--content-provider-cert and --content-provider-key go together: give both or neither")
	}
	if !c.TLS && (c.CAFile != "" || c.CertFile != "") {
		return errors.New("--content-provider-ca and --content-provider-cert need --content-provider-tls")
	}
	if !c.TLS && c.TokenFile != "" {
		return errors.New("--content-provider-token-file needs --content-provider-tls: a bearer token is never sent in the clear")
	}
	return nil
}

// contentService dials the configured providers with creds (dialOptions)
// and returns the document service of svc and the notifier of notifier,
// started with them; closeAll stops both and releases the connections.
func contentService(cfg ContentConfig, creds []grpc.DialOption, svc content.Options, notifier content.NotifierOptions) (_ *content.Service, closeAll func(), err error) {
	var conns []*grpc.ClientConn
	closeConns := func() {
		for _, c := range conns {
			_ = c.Close()
		}
	}
	// A build counts one chunk of its provider's answer (its weight against
	// content.Options.MaxBuildMemory): the limit says so, whatever gRPC's
	// default, and takes a chunk of the whole 4 MiB with its framing.
	creds = append(slices.Clip(creds), grpc.WithDefaultCallOptions(grpc.MaxCallRecvMsgSize(content.MaxProviderMessageBytes)))
	providers := map[domain.Origin]messagehubv1.BundleContentProviderClient{}
	for _, origin := range slices.Sorted(maps.Keys(cfg.Providers)) {
		conn, err := grpc.NewClient(cfg.Providers[origin], creds...)
		if err != nil {
			closeConns()
			return nil, nil, fmt.Errorf("content provider of %s: %w", messagehubv1.Domain(origin), err)
		}
		conns = append(conns, conn)
		providers[origin] = messagehubv1.NewBundleContentProviderClient(conn)
	}
	svc.Providers, notifier.Providers = providers, providers
	service := content.NewService(svc)
	notifying := content.StartNotifier(notifier)
	return service, func() {
		notifying.Close()
		service.Close()
		closeConns()
	}, nil
}

// openDocuments opens where bundles' documents are kept: a folder next to
// the embedded store, or Azure Blob Storage with Cosmos DB; nil with Cosmos
// DB and no blob storage configured.
func (a *App) openDocuments(ctx context.Context) (content.Store, error) {
	if a.cfg.Store == StoreEmbedded {
		dir, err := content.OpenDirStore(filepath.Join(a.cfg.DataDir, "content"))
		if err != nil {
			return nil, err
		}
		a.onClose("documents folder", dir.Close)
		a.backup.docs = dir
		return dir, nil
	}
	blob := a.cfg.Content.Blob
	if blob.ConnectionString == "" && blob.URL == "" {
		return nil, nil
	}
	docs, err := blobstore.Open(ctx, blobstore.Config{
		ConnectionString: blob.ConnectionString, ServiceURL: blob.URL, Container: blob.Container,
		Provision: a.cfg.Cosmos.Provision,
	})
	if err != nil {
		return nil, err
	}
	return docs, nil
}

// dialOptions are the transport credentials towards providers.
func (c ContentConfig) dialOptions() ([]grpc.DialOption, error) {
	if !c.TLS {
		return []grpc.DialOption{grpc.WithTransportCredentials(insecure.NewCredentials())}, nil
	}
	tlsConfig := &tls.Config{MinVersion: tls.VersionTLS12}
	if c.CAFile != "" {
		pem, err := os.ReadFile(c.CAFile)
		if err != nil {
			return nil, fmt.Errorf("--content-provider-ca: %w", err)
		}
		tlsConfig.RootCAs = x509.NewCertPool()
		if !tlsConfig.RootCAs.AppendCertsFromPEM(pem) {
			return nil, fmt.Errorf("--content-provider-ca: no PEM certificate in %s", c.CAFile)
		}
	}
	if c.CertFile != "" {
		cert, err := tls.LoadX509KeyPair(c.CertFile, c.KeyFile)
		if err != nil {
			return nil, fmt.Errorf("--content-provider-cert: %w", err)
		}
		tlsConfig.Certificates = []tls.Certificate{cert}
	}
	opts := []grpc.DialOption{grpc.WithTransportCredentials(credentials.NewTLS(tlsConfig))}
	if c.TokenFile != "" {
		token, err := os.ReadFile(c.TokenFile)
		if err != nil {
			return nil, fmt.Errorf("--content-provider-token-file: %w", err)
		}
		opts = append(opts, grpc.WithPerRPCCredentials(bearer(strings.TrimSpace(string(token)))))
	}
	return opts, nil
}

// bearer sends a fixed token, over TLS only.
type bearer string

func (b bearer) GetRequestMetadata(context.Context, ...string) (map[string]string, error) {
	return map[string]string{"authorization": "Bearer " + string(b)}, nil
}

func (bearer) RequireTransportSecurity() bool { return true }
