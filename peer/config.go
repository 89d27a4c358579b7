// The options of a node of the tier: their bounds, and its TLS.

package peer

import (
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/url"
	"os"
	"slices"
	"strings"
	"time"

	"github.com/ffcvfs/ffcvfs/internal/readfile"
)

// Options configure a node of the peer tier.
type Options struct {
	// Listen is the host:port this node serves its peers on. The host
	// must be given: 0.0.0.0 binds every interface, and only when asked.
	Listen string
	// Peers are the base URLs of every node (http://host:port), this one
	// included; Self is this node's among them (default: http://Listen).
	Peers []string
	Self  string
	// PeersFile, when set, is the file Peers came from: re-read when it
	// changes (every pollEvery) and on Reload, the members follow it.
	PeersFile string
	// PeersDNS, NAME:PORT, makes the members every address NAME resolves
	// to, at PORT, resolved every pollEvery (a headless service); Peers
	// may then be empty.
	PeersDNS string
	// Secret is the shared secret every node sends and checks.
	Secret string
	// Timeout bounds a request to a peer until the peer says it works
	// on the answer (102 Processing), and then fillWait times as long
	// for the answer, which the peer may read from storage (default
	// 5 s, then 60 s); past it the node reads from storage.
	Timeout time.Duration
	Logger  *slog.Logger
	// TLSCert, TLSKey and TLSCA are PEM files, all or none: this node's
	// certificate (naming its address, for server and client use), its
	// key (the owner's alone), and the CA that signs every node's. With
	// them the peers speak mutual TLS (https:// URLs): a node talks only
	// to nodes whose certificate the CA signed, beside the secret.
	TLSCert, TLSKey, TLSCA string

	tls *tls.Config // from the TLS files, by Validate
}

// DefaultTimeout is Options.Timeout's default.
const DefaultTimeout = 5 * time.Second

// MaxTimeout bounds Options.Timeout: fillWait times it is the longest an
// asker waits, well within a time.Duration.
const MaxTimeout = 10 * time.Minute

// fillWait is how many times Options.Timeout an owner that said it works
// on an answer (102 Processing) is waited for: it may be reading the page
// from storage, within storage's own timeouts and retries.
const fillWait = 12

// downHold is how long a peer that failed to answer is not asked: its
// pages are read from storage meanwhile, and one read then tries it
// again. A peer that fails again is left twice as long each time, up to
// maxDownHold, so that a list of many dead peers costs few tries.
const (
	downHold    = 10 * time.Second
	maxDownHold = 10 * time.Minute
)

// maxAsked bounds the nodes one read asks: the owner, and the next nodes
// on the ring that have not failed lately.
const maxAsked = 3

// failedWarnings bounds the warnings of peers that failed, a minute; the
// others are counted in the next one.
const failedWarnings = 5

// maxPeers bounds the peer list.
const maxPeers = 4096

// basePath is where the tier's requests go: basePath + group + "/" + key.
const basePath = "/ffcvfs-peer/"

// Bounds of the listener: connections served at once, and how long a
// connection may take to send a request, stay idle between requests, and
// take to have its answer written (a page the owner may first read from
// storage, within its read deadline).
const (
	maxConns          = 1024
	readHeaderTimeout = 10 * time.Second
	idleTimeout       = time.Minute
	writeTimeout      = 5 * time.Minute
)

// maxSkew is how far a request's time may be from the server's clock.
const maxSkew = 5 * time.Minute

// authHeader carries a request's time and MAC.
const authHeader = "X-Ffcvfs-Peer"

// tagLen is the length of a value's tag.
const tagLen = 16

// Validate checks the options and fills in defaults.
func (o *Options) Validate() error {
	host, port, err := net.SplitHostPort(o.Listen)
	switch {
	case err != nil:
		return fmt.Errorf("peer listen address %q: want HOST:PORT (%v)", o.Listen, err)
	case host == "":
		return fmt.Errorf("peer listen address %q: give the address to bind, e.g. 10.0.0.1:%s (0.0.0.0:%s binds every interface)", o.Listen, port, port)
	case o.Secret == "":
		return errors.New("the peer tier needs a shared secret (--peer-secret-file or FFCVFS_PEER_SECRET)")
	case len(o.Secret) < 16:
		return errors.New("the peer secret is shorter than 16 bytes")
	case len(o.Peers) == 0 && o.PeersDNS == "":
		return errors.New("the peer tier needs the list of peers")
	case o.Timeout < 0 || o.Timeout > MaxTimeout:
		return fmt.Errorf("peer timeout %v: want more than 0 and at most %v", o.Timeout, MaxTimeout)
	}
	// Validate runs twice (the flags', then start's): the files are read
	// once.
	if o.tls == nil && (o.TLSCert != "" || o.TLSKey != "" || o.TLSCA != "") {
		cfg, err := loadTLS(o.TLSCert, o.TLSKey, o.TLSCA)
		if err != nil {
			return err
		}
		o.tls = cfg
	}
	scheme := "http"
	if o.tls != nil {
		scheme = "https"
	}
	if o.Self == "" {
		o.Self = scheme + "://" + o.Listen
	}
	o.Self = strings.TrimSuffix(o.Self, "/")
	if o.tls != nil {
		if err := checkOwnCert(o.tls, o.Self, o.TLSCert, time.Now()); err != nil {
			return err
		}
	}
	peers, err := normalizePeers(o.Peers, scheme)
	if err != nil {
		return err
	}
	o.Peers = peers
	if o.PeersDNS != "" {
		if _, _, err := parseDNS(o.PeersDNS); err != nil {
			return err
		}
		if ip := net.ParseIP(host); ip != nil && ip.IsUnspecified() && strings.HasSuffix(o.Self, "://"+o.Listen) {
			return fmt.Errorf("--peers dns:%s with --peer-listen %s: give --peer-self, this node's URL as the name resolves to it (%s://IP:%s)", o.PeersDNS, o.Listen, scheme, port)
		}
	} else if !slices.Contains(o.Peers, o.Self) {
		return fmt.Errorf("this node (%s) is not among the peers", redact(o.Self))
	}
	if o.Timeout <= 0 {
		o.Timeout = DefaultTimeout
	}
	if o.Logger == nil {
		o.Logger = slog.New(slog.DiscardHandler)
	}
	return nil
}

// maxPEM bounds a certificate, key or CA file.
const maxPEM = 1 << 20

// loadTLS returns the mutual TLS configuration of a node: its certificate
// and key, and the CA that every peer's certificate must chain to, as
// server (clients must present one) and as client.
func loadTLS(certFile, keyFile, caFile string) (*tls.Config, error) {
	var missing []string
	for _, f := range []struct{ name, path string }{{"--peer-tls-cert", certFile}, {"--peer-tls-key", keyFile}, {"--peer-tls-ca", caFile}} {
		if f.path == "" {
			missing = append(missing, f.name)
		}
	}
	if len(missing) > 0 {
		return nil, fmt.Errorf("mutual TLS between peers needs --peer-tls-cert, --peer-tls-key and --peer-tls-ca together; %s missing", strings.Join(missing, " and "))
	}
	read := func(flag, path string) ([]byte, error) {
		b, err := readfile.Bounded(path, maxPEM)
		if err != nil {
			return nil, fmt.Errorf("%s: %w", flag, err)
		}
		return b, nil
	}
	certPEM, err := read("--peer-tls-cert", certFile)
	if err != nil {
		return nil, err
	}
	keyPEM, err := read("--peer-tls-key", keyFile)
	if err != nil {
		return nil, err
	}
	if st, err := os.Stat(keyFile); err == nil && st.Mode().Perm()&0o077 != 0 {
		return nil, fmt.Errorf("--peer-tls-key %s: readable by others (mode %v); chmod 600 it", keyFile, st.Mode().Perm())
	}
	caPEM, err := read("--peer-tls-ca", caFile)
	if err != nil {
		return nil, err
	}
	cert, err := tls.X509KeyPair(certPEM, keyPEM)
	if err != nil {
		return nil, fmt.Errorf("--peer-tls-cert %s and --peer-tls-key %s: %v", certFile, keyFile, err)
	}
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(caPEM) {
		return nil, fmt.Errorf("--peer-tls-ca %s: no PEM certificate in it", caFile)
	}
	return &tls.Config{
		MinVersion:   tls.VersionTLS12,
		Certificates: []tls.Certificate{cert},
		RootCAs:      pool,
		ClientCAs:    pool,
		ClientAuth:   tls.RequireAndVerifyClientCert,
	}, nil
}

// checkOwnCert checks this node's certificate as its peers will: valid
// now, signed by the CA, for server and client use, and naming the host
// of self, this node's URL. A node whose certificate fails would start,
// and every peer refuse it.
func checkOwnCert(cfg *tls.Config, self, file string, now time.Time) error {
	leaf, err := x509.ParseCertificate(cfg.Certificates[0].Certificate[0])
	if err != nil {
		return fmt.Errorf("--peer-tls-cert %s: %v", file, err)
	}
	switch {
	case now.After(leaf.NotAfter):
		return fmt.Errorf("--peer-tls-cert %s expired on %s: every peer would refuse it", file, leaf.NotAfter.UTC().Format(time.DateTime+" MST"))
	case now.Before(leaf.NotBefore):
		return fmt.Errorf("--peer-tls-cert %s is valid from %s only (is this machine's clock right?)", file, leaf.NotBefore.UTC().Format(time.DateTime+" MST"))
	}
	inter := x509.NewCertPool()
	for _, der := range cfg.Certificates[0].Certificate[1:] {
		if c, err := x509.ParseCertificate(der); err == nil {
			inter.AddCert(c)
		}
	}
	if _, err := leaf.Verify(x509.VerifyOptions{Roots: cfg.RootCAs, Intermediates: inter, CurrentTime: now,
		KeyUsages: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth, x509.ExtKeyUsageClientAuth}}); err != nil {
		return fmt.Errorf("--peer-tls-cert %s does not hold for --peer-tls-ca, as a server's and a client's: %v", file, err)
	}
	u, err := url.Parse(self)
	if err != nil {
		return fmt.Errorf("this node's URL %q: %v", self, err)
	}
	if err := leaf.VerifyHostname(u.Hostname()); err != nil {
		return fmt.Errorf("--peer-tls-cert %s names %s, not %s, this node's address among the peers (--peer-self, or --peer-listen): every peer would refuse it",
			file, certNames(leaf), u.Hostname())
	}
	return nil
}

// certNames lists the addresses a certificate names.
func certNames(c *x509.Certificate) string {
	var names []string
	names = append(names, c.DNSNames...)
	for _, ip := range c.IPAddresses {
		names = append(names, ip.String())
	}
	if len(names) == 0 {
		return "no address"
	}
	return strings.Join(names, ", ")
}
