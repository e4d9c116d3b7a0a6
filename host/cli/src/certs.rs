//! `wasmraft certs init DIR`: a throwaway PKI for a dev or test cluster.
//!
//! Two CAs, so that a certificate issued to a client can never pass the peer
//! port's handshake: the peer port trusts only the cluster CA, which signs
//! node certificates and nothing else; the client CA signs client and admin
//! certificates. A node serves clients on its client port and checks their
//! certificates against the client CA (`client_ca`).

use std::fs::OpenOptions;
use std::io::Write;
use std::net::IpAddr;
use std::path::{Path, PathBuf};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use anyhow::{Context, bail};
use rcgen::string::Ia5String;
use rcgen::{
    BasicConstraints, CertificateParams, DistinguishedName, DnType, ExtendedKeyUsagePurpose, IsCa,
    Issuer, KeyPair, KeyUsagePurpose, SanType,
};

/// The common name a node's `admins` list names to let the admin certificate in.
/// The common name of `admin.pem`, which `wasmraft dev --tls` makes an admin.
pub const ADMIN_CN: &str = "wasmraft-admin";
const CLIENT_CN: &str = "wasmraft-client";
const CLUSTER_CA_CN: &str = "wasmraft cluster CA";
const CLIENT_CA_CN: &str = "wasmraft client CA";

const DAY: Duration = Duration::from_secs(24 * 60 * 60);

#[derive(clap::Subcommand, Debug)]
pub enum CertsCommand {
    /// Write a throwaway cluster CA, client CA, node certificates and client/admin
    /// certificates for a dev or test cluster (not for production).
    #[command(after_help = "Examples:\n  wasmraft certs init certs --nodes 3\n  wasmraft certs init certs --nodes 5 --host node1.example --host 10.0.0.1 --force")]
    Init(InitArgs),
}

#[derive(clap::Args, Debug)]
pub struct InitArgs {
    /// Directory to write into (created if missing).
    pub dir: PathBuf,
    /// How many node certificates (node-1 .. node-N).
    #[arg(long, default_value_t = 3)]
    pub nodes: u64,
    /// Extra host names or IP addresses for the node certificates (repeatable).
    #[arg(long = "host")]
    pub hosts: Vec<String>,
    /// Overwrite an existing set.
    #[arg(long)]
    pub force: bool,
}

/// The files `init` wrote. Paths are absolute (the directory is canonicalised),
/// so they work in a config file read from any working directory.
#[derive(Clone, Debug)]
pub struct CertSet {
    /// The directory, canonicalised.
    pub dir: PathBuf,
    /// The cluster CA certificate: what nodes trust on the peer port, and what
    /// clients trust (`--cacert`) to check a node's server certificate.
    pub ca: PathBuf,
    /// The client CA certificate: what a node's client port trusts.
    pub client_ca: PathBuf,
    /// `(cert, key)` per node; index 0 is node 1.
    pub nodes: Vec<(PathBuf, PathBuf)>,
    /// `(cert, key)` for an ordinary client (CN `wasmraft-client`).
    pub client: (PathBuf, PathBuf),
    /// `(cert, key)` for an administrator (CN `wasmraft-admin`).
    pub admin: (PathBuf, PathBuf),
}

/// Runs a `certs` subcommand and prints a summary of what it wrote.
pub async fn run(cmd: CertsCommand) -> anyhow::Result<()> {
    match cmd {
        CertsCommand::Init(args) => {
            let set = init(&args.dir, args.nodes, &args.hosts, args.force)?;
            print_summary(&set);
            Ok(())
        }
    }
}

/// Writes the set without printing; returns the paths. Used by `wasmraft dev --tls`.
///
/// Fails, writing nothing, if `dir/ca.pem` exists and `force` is false, if
/// `nodes` is 0, or if a `hosts` entry is neither an IP address nor an ASCII
/// DNS name. With `force`, every file of the set is replaced (old files of
/// the same name are removed first, so key files end up 0o600 whatever their
/// old mode was).
pub fn init(dir: &Path, nodes: u64, hosts: &[String], force: bool) -> anyhow::Result<CertSet> {
    let ca_path = dir.join("ca.pem");
    let exists = ca_path
        .try_exists()
        .with_context(|| format!("cannot check {}", ca_path.display()))?;
    if exists && !force {
        bail!(
            "{} already exists: refusing to overwrite a certificate set \
             (pass --force to replace it)",
            ca_path.display()
        );
    }
    if nodes == 0 {
        bail!("--nodes must be at least 1");
    }
    let mut node_sans = Vec::new();
    let defaults = ["localhost", "127.0.0.1", "::1"].into_iter();
    for host in defaults.chain(hosts.iter().map(String::as_str)) {
        let san = san_for(host)?;
        if !node_sans.contains(&san) {
            node_sans.push(san);
        }
    }

    // Everything is generated before anything is written, so a bad argument or
    // a crypto failure leaves the directory untouched.
    let since_epoch = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .context("the system clock is before 1970")?;
    let (cluster_ca, cluster_issuer) = new_ca(CLUSTER_CA_CN, since_epoch)?;
    let (client_ca, client_issuer) = new_ca(CLIENT_CA_CN, since_epoch)?;
    let mut node_pems = Vec::new();
    for i in 1..=nodes {
        node_pems.push(new_leaf(
            &format!("wasmraft-node-{i}"),
            node_sans.clone(),
            // A node is a server on both ports, and a client when it dials
            // peers or forwards a request to the leader.
            &[
                ExtendedKeyUsagePurpose::ServerAuth,
                ExtendedKeyUsagePurpose::ClientAuth,
            ],
            &cluster_issuer,
            since_epoch,
        )?);
    }
    let client_auth = &[ExtendedKeyUsagePurpose::ClientAuth];
    let client = new_leaf(
        CLIENT_CN,
        Vec::new(),
        client_auth,
        &client_issuer,
        since_epoch,
    )?;
    let admin = new_leaf(
        ADMIN_CN,
        Vec::new(),
        client_auth,
        &client_issuer,
        since_epoch,
    )?;

    std::fs::create_dir_all(dir).with_context(|| format!("cannot create {}", dir.display()))?;
    let set = existing(dir, nodes)?;
    let dir = set.dir.clone();

    // `ca.pem` goes last: it is what marks a complete set (a rerun without
    // --force refuses to touch it), so an interrupted run can simply be rerun.
    let mut files = vec![
        (dir.join("ca-key.pem"), cluster_ca.key, true),
        (set.client_ca.clone(), client_ca.cert, false),
        (dir.join("client-ca-key.pem"), client_ca.key, true),
    ];
    for ((cert, key), pem) in set.nodes.iter().zip(node_pems) {
        files.push((cert.clone(), pem.cert, false));
        files.push((key.clone(), pem.key, true));
    }
    for ((cert, key), pem) in [(&set.client, client), (&set.admin, admin)] {
        files.push((cert.clone(), pem.cert, false));
        files.push((key.clone(), pem.key, true));
    }
    files.push((set.ca.clone(), cluster_ca.cert, false));
    for (path, contents, private) in &files {
        write_file(path, contents, *private)?;
    }
    Ok(set)
}

/// The paths of a set in `dir` (made by [`init`] with `nodes` nodes).
pub fn existing(dir: &Path, nodes: u64) -> anyhow::Result<CertSet> {
    let dir =
        std::fs::canonicalize(dir).with_context(|| format!("cannot resolve {}", dir.display()))?;
    let pair = |stem: &str| {
        (
            dir.join(format!("{stem}.pem")),
            dir.join(format!("{stem}-key.pem")),
        )
    };
    Ok(CertSet {
        ca: dir.join("ca.pem"),
        client_ca: dir.join("client-ca.pem"),
        nodes: (1..=nodes).map(|i| pair(&format!("node-{i}"))).collect(),
        client: pair("client"),
        admin: pair("admin"),
        dir: dir.clone(),
    })
}

/// A certificate and its private key, both PEM.
struct Pem {
    cert: String,
    key: String,
}

/// A subject alternative name: an IP address if `host` parses as one, else a
/// DNS name.
fn san_for(host: &str) -> anyhow::Result<SanType> {
    if let Ok(ip) = host.parse::<IpAddr>() {
        return Ok(SanType::IpAddress(ip));
    }
    if host.is_empty() || host.contains(char::is_whitespace) {
        bail!("invalid --host {host:?}: not an IP address or a DNS name");
    }
    let name = Ia5String::try_from(host)
        .with_context(|| format!("invalid --host {host:?}: a DNS name must be ASCII"))?;
    Ok(SanType::DnsName(name))
}

/// Parameters with only a common name and the validity window set.
///
/// The window runs from a day ago, so that a node whose clock is a little
/// behind the machine that made the set still accepts it, to ten years on, so
/// that a dev set never expires under a long-lived test setup. It is computed
/// from the system clock by adding a `std` `Duration` to the epoch, because
/// rcgen does not re-export `time` and this crate does not depend on it.
fn base_params(common_name: &str, since_epoch: Duration) -> CertificateParams {
    let now = rcgen::date_time_ymd(1970, 1, 1) + since_epoch;
    let mut params = CertificateParams::default();
    params.distinguished_name = DistinguishedName::new();
    params
        .distinguished_name
        .push(DnType::CommonName, common_name);
    params.not_before = now - DAY;
    params.not_after = now + 3653 * DAY;
    params
}

/// A self-signed CA that may sign leaf certificates only (path length 0).
fn new_ca(
    common_name: &str,
    since_epoch: Duration,
) -> anyhow::Result<(Pem, Issuer<'static, KeyPair>)> {
    let mut params = base_params(common_name, since_epoch);
    params.is_ca = IsCa::Ca(BasicConstraints::Constrained(0));
    params.key_usages = vec![KeyUsagePurpose::KeyCertSign, KeyUsagePurpose::CrlSign];
    let key = KeyPair::generate().context("cannot generate a key pair")?;
    let cert = params
        .self_signed(&key)
        .with_context(|| format!("cannot create the {common_name}"))?;
    let pem = Pem {
        cert: cert.pem(),
        key: key.serialize_pem(),
    };
    Ok((pem, Issuer::new(params, key)))
}

/// A leaf certificate for `common_name`, signed by `issuer`.
fn new_leaf(
    common_name: &str,
    sans: Vec<SanType>,
    extended_key_usages: &[ExtendedKeyUsagePurpose],
    issuer: &Issuer<'static, KeyPair>,
    since_epoch: Duration,
) -> anyhow::Result<Pem> {
    let mut params = base_params(common_name, since_epoch);
    params.is_ca = IsCa::ExplicitNoCa;
    params.subject_alt_names = sans;
    // Key encipherment means nothing for the P-256 keys rcgen generates; it is
    // there for tools that expect the usual server pair. rustls checks only
    // the extended key usages.
    params.key_usages = vec![
        KeyUsagePurpose::DigitalSignature,
        KeyUsagePurpose::KeyEncipherment,
    ];
    params.extended_key_usages = extended_key_usages.to_vec();
    params.use_authority_key_identifier_extension = true;
    let key = KeyPair::generate().context("cannot generate a key pair")?;
    let cert = params
        .signed_by(&key, issuer)
        .with_context(|| format!("cannot create the certificate for {common_name}"))?;
    Ok(Pem {
        cert: cert.pem(),
        key: key.serialize_pem(),
    })
}

/// Writes `contents` to a new file at `path`, replacing any old one. Private
/// (key) files are created with mode 0o600; removing the old file first makes
/// sure of that, and `create_new` will not follow a symlink left in its place.
fn write_file(path: &Path, contents: &str, private: bool) -> anyhow::Result<()> {
    if let Err(e) = std::fs::remove_file(path)
        && e.kind() != std::io::ErrorKind::NotFound
    {
        return Err(e).with_context(|| format!("cannot replace {}", path.display()));
    }
    let mut options = OpenOptions::new();
    options.write(true).create_new(true);
    if private {
        owner_only(&mut options);
    }
    let mut file = options
        .open(path)
        .with_context(|| format!("cannot create {}", path.display()))?;
    file.write_all(contents.as_bytes())
        .with_context(|| format!("cannot write {}", path.display()))?;
    Ok(())
}

#[cfg(unix)]
fn owner_only(options: &mut OpenOptions) {
    use std::os::unix::fs::OpenOptionsExt;
    options.mode(0o600);
}

/// Elsewhere the file gets the platform's default permissions.
#[cfg(not(unix))]
fn owner_only(_: &mut OpenOptions) {}

fn print_summary(set: &CertSet) {
    let toml_str = |p: &Path| toml::Value::String(p.display().to_string()).to_string();
    let (node_cert, node_key) = &set.nodes[0];
    let n = set.nodes.len();

    println!(
        "wrote a throwaway PKI to {} (for a dev or test cluster, not for production):",
        set.dir.display()
    );
    let nodes = format!("node N, N = 1..{n} (CN wasmraft-node-N):");
    let rows = [
        (
            "cluster CA (signs node certificates):",
            "ca.pem, ca-key.pem",
        ),
        (
            "client CA (signs client certificates):",
            "client-ca.pem, client-ca-key.pem",
        ),
        (nodes.as_str(), "node-N.pem, node-N-key.pem"),
        ("client (CN wasmraft-client):", "client.pem, client-key.pem"),
        ("admin (CN wasmraft-admin):", "admin.pem, admin-key.pem"),
    ];
    for (what, files) in rows {
        println!("  {what:<40} {files}");
    }
    println!();
    println!("node 1's config (node N uses node-N.pem and node-N-key.pem):");
    println!("  [tls]");
    println!("  cert = {}", toml_str(node_cert));
    println!("  key = {}", toml_str(node_key));
    println!("  ca = {}", toml_str(&set.ca));
    println!("  client_ca = {}", toml_str(&set.client_ca));
    println!("  client_cert_auth = true");
    println!("  admins = [\"{ADMIN_CN}\"]");
    println!();
    println!("a client (client.pem and client-key.pem for one without admin rights):");
    println!(
        "  wasmraft status --cacert {} --cert {} --key {}",
        set.ca.display(),
        set.admin.0.display(),
        set.admin.1.display()
    );
}

#[cfg(test)]
mod tests {
    use super::*;

    fn read(path: &Path) -> String {
        std::fs::read_to_string(path).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
    }

    #[cfg(unix)]
    fn assert_private(path: &Path) {
        use std::os::unix::fs::PermissionsExt;
        let mode = std::fs::metadata(path).unwrap().permissions().mode() & 0o777;
        assert_eq!(mode, 0o600, "{} has mode {mode:o}", path.display());
    }

    #[cfg(not(unix))]
    fn assert_private(_: &Path) {}

    fn check_set(set: &CertSet, nodes: usize) {
        assert_eq!(set.nodes.len(), nodes);
        let mut pairs = set.nodes.clone();
        pairs.push(set.client.clone());
        pairs.push(set.admin.clone());
        pairs.push((set.ca.clone(), set.dir.join("ca-key.pem")));
        pairs.push((set.client_ca.clone(), set.dir.join("client-ca-key.pem")));
        for (cert, key) in &pairs {
            assert!(
                read(cert).starts_with("-----BEGIN CERTIFICATE-----"),
                "{}",
                cert.display()
            );
            assert!(
                read(key).starts_with("-----BEGIN PRIVATE KEY-----"),
                "{}",
                key.display()
            );
            assert_private(key);
        }
        assert_eq!(set.nodes[0].0, set.dir.join("node-1.pem"));
        assert_eq!(set.nodes[0].1, set.dir.join("node-1-key.pem"));
        assert_eq!(set.client.0, set.dir.join("client.pem"));
        assert_eq!(set.admin.1, set.dir.join("admin-key.pem"));
    }

    #[test]
    fn init_writes_the_set_and_refuses_to_overwrite_it_without_force() {
        let tmp = tempfile::tempdir().unwrap();
        let dir = tmp.path().join("pki");
        let hosts = [
            "node.example".to_string(),
            "10.0.0.5".to_string(),
            "localhost".to_string(),
        ];

        let set = init(&dir, 2, &hosts, false).unwrap();
        check_set(&set, 2);
        assert!(!set.dir.join("node-3.pem").exists());
        let first_ca = read(&set.ca);

        let err = init(&dir, 2, &hosts, false).unwrap_err();
        assert!(format!("{err:#}").contains("ca.pem"), "{err:#}");
        assert_eq!(
            read(&set.ca),
            first_ca,
            "a refused init must not touch the set"
        );

        let set = init(&dir, 3, &[], true).unwrap();
        check_set(&set, 3);
        assert_ne!(read(&set.ca), first_ca, "--force must write a new CA");
    }

    #[test]
    fn init_rejects_bad_arguments_before_writing() {
        let tmp = tempfile::tempdir().unwrap();
        let dir = tmp.path().join("pki");
        assert!(init(&dir, 0, &[], false).is_err());
        for bad in ["", "two words", "n\u{e9}ud.example"] {
            let err = init(&dir, 1, &[bad.to_string()], false).unwrap_err();
            assert!(format!("{err:#}").contains("--host"), "{bad:?}: {err:#}");
        }
        assert!(!dir.exists());
    }
}
