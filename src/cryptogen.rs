//! `weft crypto generate`: MSP folders and TLS material for a network, the
//! equivalent of Fabric's `cryptogen generate`.
//!
//! The input is cryptogen's own `crypto-config.yaml` (see
//! `config/crypto.yaml`); the output is cryptogen's folder layout, which
//! Fabric's peer, orderer, CLI and SDKs read as they read cryptogen's:
//!
//! ```text
//! <output>/peerOrganizations/<domain>/        (ordererOrganizations/ for orderer orgs)
//!   ca/     ca.<domain>-cert.pem, priv_sk              the org's signing CA
//!   tlsca/  tlsca.<domain>-cert.pem, priv_sk           the org's TLS CA
//!   msp/    cacerts/ tlscacerts/ admincerts/ config.yaml   the org's verifying MSP
//!   peers/<node CN>/                                   (orderers/ in orderer orgs)
//!     msp/  cacerts/ tlscacerts/ admincerts/ signcerts/<CN>-cert.pem keystore/priv_sk config.yaml
//!     tls/  ca.crt server.crt server.key
//!   users/Admin@<domain>/, users/User<i>@<domain>/
//!     msp/  (as for nodes)
//!     tls/  ca.crt client.crt client.key
//! ```
//!
//! Keys are ECDSA P-256, PEM PKCS#8, named `priv_sk`. With `EnableNodeOUs`
//! the signing certificates carry the NodeOU of their role (`peer`,
//! `orderer`, `admin`, `client`), `config.yaml` maps those OUs to roles and
//! `admincerts/` stays empty; without it, `admincerts/` holds the Admin's
//! certificate (a user's own MSP holds the user's, as cryptogen does).
//!
//! **MSP IDs.** cryptogen does not name MSPs; the channel configuration
//! does. weft's convention, used by its defaults and reported in the
//! [`Summary`], is `<Name>MSP`: an org with `Name: Org1` is `Org1MSP`,
//! `Name: Orderer` is `OrdererMSP` (see [`msp_id`]).
//!
//! Differences from cryptogen (all deliberate but the last):
//!
//! - an unknown key in the config file or a bad name is an error naming
//!   the field, where cryptogen ignores or accepts it;
//! - an org folder that already exists (and is not empty) is an error
//!   naming it, where cryptogen silently writes over it and the old keys
//!   are lost; nothing at all is written when any check fails;
//! - `Users.Count` is honoured in orderer orgs too (cryptogen gives an
//!   orderer org only its Admin);
//! - certificate signatures are always low-S (see `x509.rs`);
//! - when the CA has an `OrganizationalUnit` and NodeOUs are on, the two
//!   OUs of an issued certificate are two RDNs where Go writes one
//!   multi-valued RDN (rcgen cannot write one); X.509 readers, Fabric's
//!   MSP included, see both OUs either way.
//!
//! Certificates otherwise match cryptogen's (Fabric 2.5) in subject and
//! issuer bytes, extensions, lifetime and key format; the test
//! `output_matches_real_cryptogen_output` compares them with real output.
//!
//! Everything is generated in memory first and written into a staging
//! folder inside the output folder, then each org folder is moved into
//! place; if writing fails midway, what was written is removed.

mod config;
mod x509;

#[cfg(test)]
mod tests;

use std::fmt;
use std::fs;
use std::path::{Path, PathBuf};

use anyhow::{Context, anyhow, bail};
use ring::rand::SystemRandom;
use time::OffsetDateTime;

pub use config::OrgKind;
use config::OrgPlan;
use x509::{Ca, Profile, Validity};

/// What [`generate`] wrote.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Summary {
    /// The output folder.
    pub output: PathBuf,
    /// Each organization, orderer orgs first, in file order.
    pub orgs: Vec<OrgSummary>,
}

/// One generated organization.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct OrgSummary {
    pub kind: OrgKind,
    /// `Name` in the config file.
    pub name: String,
    /// The MSP ID by weft's convention, `<Name>MSP`.
    pub msp_id: String,
    pub domain: String,
    pub node_ous: bool,
    /// The org folder, e.g. `<output>/peerOrganizations/org1.example.com`.
    pub folder: PathBuf,
    /// Common names of the peers or orderers, e.g. `peer0.org1.example.com`.
    pub nodes: Vec<String>,
    /// Common names of the users, Admin first: `Admin@org1.example.com`,
    /// `User1@org1.example.com`, …
    pub users: Vec<String>,
}

/// weft's MSP ID for the org named `name` in a crypto config: `<name>MSP`.
pub fn msp_id(name: &str) -> String {
    format!("{name}MSP")
}

/// Reads the cryptogen-format config at `config_path` and writes every
/// organization it defines under `output`.
///
/// The whole config is checked, and every target org folder is checked to
/// be absent (or empty), before anything is written. Errors name the config
/// file and the field (`crypto.yaml: PeerOrgs[0].Domain: missing`) or the
/// folder.
pub fn generate(config_path: &Path, output: &Path) -> anyhow::Result<Summary> {
    generate_at(config_path, output, OffsetDateTime::now_utc())
}

/// Reads and checks a crypto config as [`generate`] does, writing nothing.
#[cfg(feature = "fuzzing")]
pub(crate) fn check_config(config_path: &Path) -> anyhow::Result<()> {
    read_plans(config_path).map(drop)
}

/// The organisations `config_path` plans; errors name the file and field.
fn read_plans(config_path: &Path) -> anyhow::Result<Vec<config::OrgPlan>> {
    let origin = config_path.display();
    let text = fs::read(config_path).with_context(|| format!("{origin}: cannot read"))?;
    config::parse(&text).map_err(|reason| anyhow!("{origin}: {reason}"))
}

/// [`generate`] with the clock as an argument: certificates are valid from
/// `now` (rounded to the minute, minus five minutes) for 3650 days.
fn generate_at(config_path: &Path, output: &Path, now: OffsetDateTime) -> anyhow::Result<Summary> {
    let plans = read_plans(config_path)?;
    check_targets(output, &plans)?;

    let validity = Validity::starting_at(now)?;
    let rng = SystemRandom::new();
    let trees = plans
        .iter()
        .map(|plan| {
            build_org(plan, &validity, &rng)
                .with_context(|| format!("generating {}", org_folder(plan).display()))
        })
        .collect::<anyhow::Result<Vec<_>>>()?;
    let staged: Vec<(PathBuf, Tree)> = plans.iter().map(org_folder).zip(trees).collect();
    write_orgs(output, &staged)?;

    let orgs = plans
        .iter()
        .map(|plan| OrgSummary {
            kind: plan.kind,
            name: plan.name.clone(),
            msp_id: msp_id(&plan.name),
            domain: plan.domain.clone(),
            node_ous: plan.node_ous,
            folder: output.join(org_folder(plan)),
            nodes: plan.nodes.iter().map(|n| n.common_name.clone()).collect(),
            users: user_names(plan),
        })
        .collect();
    Ok(Summary {
        output: output.to_owned(),
        orgs,
    })
}

/// The org folder relative to the output folder.
fn org_folder(plan: &OrgPlan) -> PathBuf {
    Path::new(plan.kind.folder()).join(&plan.domain)
}

/// Admin first, then `User1` … `User<n>`.
fn user_names(plan: &OrgPlan) -> Vec<String> {
    std::iter::once(format!("Admin@{}", plan.domain))
        .chain((1..=plan.users).map(|i| format!("User{i}@{}", plan.domain)))
        .collect()
}

/// `<common name>-cert.pem`, cryptogen's certificate file name.
fn cert_file(common_name: &str) -> String {
    format!("{common_name}-cert.pem")
}

/// Refuses to touch an output that is not a folder or an org folder that
/// already has content: regenerating over it would replace the org's keys.
fn check_targets(output: &Path, plans: &[OrgPlan]) -> anyhow::Result<()> {
    // The output may be a symlink to a folder; org folders may not be.
    if let Ok(metadata) = fs::metadata(output)
        && !metadata.is_dir()
    {
        bail!("{}: exists and is not a folder", output.display());
    }
    for plan in plans {
        let target = output.join(org_folder(plan));
        if !is_absent_or_empty_dir(&target)? {
            bail!(
                "{}: already exists; weft never overwrites crypto material, since that would \
                 replace the organization's keys. Remove the folder or choose another output folder",
                target.display()
            );
        }
    }
    Ok(())
}

fn is_absent_or_empty_dir(path: &Path) -> anyhow::Result<bool> {
    match fs::symlink_metadata(path) {
        Err(error) if error.kind() == std::io::ErrorKind::NotFound => Ok(true),
        Err(error) => Err(error).with_context(|| format!("{}: cannot inspect", path.display())),
        Ok(metadata) if !metadata.is_dir() => Ok(false),
        Ok(_) => {
            let mut entries =
                fs::read_dir(path).with_context(|| format!("{}: cannot list", path.display()))?;
            Ok(entries.next().is_none())
        }
    }
}

// ---------------------------------------------------------------------------
// Building an org in memory.

/// Files and folders of one org, relative to its folder.
#[derive(Debug, Default)]
struct Tree {
    entries: Vec<Entry>,
}

#[derive(Debug)]
enum Entry {
    /// A folder that may stay empty (`admincerts/` with NodeOUs).
    Dir(PathBuf),
    File {
        path: PathBuf,
        contents: Vec<u8>,
        /// Private keys are readable by their owner only.
        secret: bool,
    },
}

impl Tree {
    fn dir(&mut self, path: PathBuf) {
        self.entries.push(Entry::Dir(path));
    }

    fn file(&mut self, path: PathBuf, contents: &str) {
        self.entries.push(Entry::File {
            path,
            contents: contents.as_bytes().to_vec(),
            secret: false,
        });
    }

    fn secret(&mut self, path: PathBuf, contents: &str) {
        self.entries.push(Entry::File {
            path,
            contents: contents.as_bytes().to_vec(),
            secret: true,
        });
    }
}

/// An org's two CAs and what every MSP folder of the org shares.
struct OrgCas<'a> {
    plan: &'a OrgPlan,
    ca: Ca,
    tls_ca: Ca,
    ca_file: String,
    tls_ca_file: String,
    validity: &'a Validity,
    rng: &'a SystemRandom,
}

/// A certificate placed in `admincerts/` when NodeOUs are off.
struct AdminCert {
    file: String,
    pem: String,
}

/// Which end of a TLS connection an identity's `tls/` files are named for.
#[derive(Debug, Clone, Copy)]
enum TlsSide {
    Server,
    Client,
}

fn build_org(plan: &OrgPlan, validity: &Validity, rng: &SystemRandom) -> anyhow::Result<Tree> {
    let ca_name = x509::Name {
        country: plan.ca.country.clone(),
        province: plan.ca.province.clone(),
        locality: plan.ca.locality.clone(),
        street_address: plan.ca.street_address.clone(),
        postal_code: plan.ca.postal_code.clone(),
        organization: Some(plan.domain.clone()),
        organizational_units: plan.ca.organizational_unit.iter().cloned().collect(),
        common_name: plan.ca.common_name.clone(),
    };
    // cryptogen names the TLS CA "tls" + the CA's common name.
    let tls_ca_name = x509::Name {
        common_name: format!("tls{}", plan.ca.common_name),
        ..ca_name.clone()
    };
    let org = OrgCas {
        plan,
        ca: Ca::new(&ca_name, validity, rng)?,
        tls_ca: Ca::new(&tls_ca_name, validity, rng)?,
        ca_file: cert_file(&ca_name.common_name),
        tls_ca_file: cert_file(&tls_ca_name.common_name),
        validity,
        rng,
    };

    let mut tree = Tree::default();
    tree.file(Path::new("ca").join(&org.ca_file), &org.ca.cert_pem);
    tree.secret(Path::new("ca").join("priv_sk"), &org.ca.key_pem);
    tree.file(
        Path::new("tlsca").join(&org.tls_ca_file),
        &org.tls_ca.cert_pem,
    );
    tree.secret(Path::new("tlsca").join("priv_sk"), &org.tls_ca.key_pem);

    // The Admin comes first: without NodeOUs its certificate is what makes
    // it an admin, and it is copied into the other MSP folders.
    let users = user_names(plan);
    let (admin_name, other_users) = users
        .split_first()
        .ok_or_else(|| anyhow!("an organization always has an Admin"))?;
    let admin = local_msp(&mut tree, &org, &Member::user(admin_name, "admin"), None)?;
    for user in other_users {
        local_msp(&mut tree, &org, &Member::user(user, "client"), None)?;
    }
    for node in &plan.nodes {
        let member = Member {
            dir: Path::new(plan.kind.nodes_folder()).join(&node.common_name),
            common_name: &node.common_name,
            node_ou: plan.kind.node_ou(),
            side: TlsSide::Server,
            sans: &node.sans,
        };
        local_msp(&mut tree, &org, &member, Some(&admin))?;
    }
    verifying_msp(&mut tree, &org, Path::new("msp"), &admin);
    Ok(tree)
}

/// A node or user of an org, as its local MSP is generated.
struct Member<'a> {
    /// Its folder in the org folder: `peers/<CN>`, `users/<CN>`, …
    dir: PathBuf,
    common_name: &'a str,
    /// The NodeOU of its role, put in its certificate when NodeOUs are on.
    node_ou: &'a str,
    side: TlsSide,
    /// SANs of its TLS certificate.
    sans: &'a [String],
}

impl<'a> Member<'a> {
    fn user(common_name: &'a str, node_ou: &'a str) -> Self {
        Self {
            dir: Path::new("users").join(common_name),
            common_name,
            node_ou,
            side: TlsSide::Client,
            sans: &[],
        }
    }
}

/// The MSP folder and TLS files of one node or user. `admin` is the
/// certificate for `admincerts/` without NodeOUs; `None` puts the member's
/// own there (users, as cryptogen does). Returns the member's signing
/// certificate.
fn local_msp(
    tree: &mut Tree,
    org: &OrgCas<'_>,
    member: &Member<'_>,
    admin: Option<&AdminCert>,
) -> anyhow::Result<AdminCert> {
    let common_name = member.common_name;
    let ous: &[&str] = if org.plan.node_ous {
        &[member.node_ou]
    } else {
        &[]
    };
    let signing = org.ca.issue(
        common_name,
        ous,
        Profile::Signing,
        &[],
        org.validity,
        org.rng,
    )?;
    let tls = org.tls_ca.issue(
        common_name,
        &[],
        Profile::Tls,
        member.sans,
        org.validity,
        org.rng,
    )?;
    let own = AdminCert {
        file: cert_file(common_name),
        pem: signing.cert_pem.clone(),
    };

    let msp = member.dir.join("msp");
    tree.file(
        msp.join("signcerts").join(cert_file(common_name)),
        &signing.cert_pem,
    );
    tree.secret(msp.join("keystore").join("priv_sk"), &signing.key_pem);
    verifying_msp(tree, org, &msp, admin.unwrap_or(&own));

    let (cert_name, key_name) = match member.side {
        TlsSide::Server => ("server.crt", "server.key"),
        TlsSide::Client => ("client.crt", "client.key"),
    };
    let tls_dir = member.dir.join("tls");
    tree.file(tls_dir.join("ca.crt"), &org.tls_ca.cert_pem);
    tree.file(tls_dir.join(cert_name), &tls.cert_pem);
    tree.secret(tls_dir.join(key_name), &tls.key_pem);
    Ok(own)
}

/// What every MSP folder of the org holds: the CA and TLS CA, admincerts
/// and, with NodeOUs, `config.yaml`.
fn verifying_msp(tree: &mut Tree, org: &OrgCas<'_>, msp: &Path, admin: &AdminCert) {
    tree.file(msp.join("cacerts").join(&org.ca_file), &org.ca.cert_pem);
    tree.file(
        msp.join("tlscacerts").join(&org.tls_ca_file),
        &org.tls_ca.cert_pem,
    );
    tree.dir(msp.join("admincerts"));
    if org.plan.node_ous {
        tree.file(msp.join("config.yaml"), &node_ous_config(&org.ca_file));
    } else {
        tree.file(msp.join("admincerts").join(&admin.file), &admin.pem);
    }
}

/// `config.yaml` exactly as cryptogen writes it: each NodeOU pinned to the
/// org's CA.
fn node_ous_config(ca_file: &str) -> String {
    let mut yaml = String::from("NodeOUs:\n  Enable: true\n");
    for (key, ou) in [
        ("ClientOUIdentifier", "client"),
        ("PeerOUIdentifier", "peer"),
        ("AdminOUIdentifier", "admin"),
        ("OrdererOUIdentifier", "orderer"),
    ] {
        yaml.push_str(&format!(
            "  {key}:\n    Certificate: cacerts/{ca_file}\n    OrganizationalUnitIdentifier: {ou}\n"
        ));
    }
    yaml
}

// ---------------------------------------------------------------------------
// Writing.

/// Writes the orgs into a staging folder inside `output`, then moves each
/// into place. On failure everything this call created is removed again.
fn write_orgs(output: &Path, orgs: &[(PathBuf, Tree)]) -> anyhow::Result<()> {
    let output_existed = output.exists();
    fs::create_dir_all(output).with_context(|| format!("{}: cannot create", output.display()))?;
    let staging = output.join(format!(".weft-crypto-staging-{}", std::process::id()));
    if let Err(error) = fs::create_dir(&staging) {
        if !output_existed {
            let _ = fs::remove_dir(output);
        }
        return Err(error).with_context(|| {
            format!(
                "{}: cannot create the staging folder (if it is left from an interrupted run, remove it)",
                staging.display()
            )
        });
    }

    let mut undo = Undo::default();
    let result = stage_and_place(output, &staging, orgs, &mut undo);
    let staging_removed = fs::remove_dir_all(&staging);
    if let Err(error) = result {
        undo.run();
        if !output_existed {
            let _ = fs::remove_dir(output);
        }
        return Err(error);
    }
    staging_removed.with_context(|| {
        format!(
            "the crypto material was written, but the staging folder {} could not be removed",
            staging.display()
        )
    })
}

/// What [`stage_and_place`] did to the output folder, to take it back.
#[derive(Debug, Default)]
struct Undo {
    /// Org folders moved into place.
    placed: Vec<PathBuf>,
    /// Empty org folders that were removed to move ours into their place.
    emptied: Vec<PathBuf>,
    /// `peerOrganizations/` or `ordererOrganizations/`, if created.
    created: Vec<PathBuf>,
}

impl Undo {
    /// Best effort: this runs after an error, which is what gets reported.
    fn run(&self) {
        for folder in self.placed.iter().rev() {
            let _ = fs::remove_dir_all(folder);
        }
        for folder in &self.emptied {
            let _ = fs::create_dir(folder);
        }
        for folder in self.created.iter().rev() {
            let _ = fs::remove_dir(folder);
        }
    }
}

fn stage_and_place(
    output: &Path,
    staging: &Path,
    orgs: &[(PathBuf, Tree)],
    undo: &mut Undo,
) -> anyhow::Result<()> {
    for (folder, tree) in orgs {
        write_tree(&staging.join(folder), tree)?;
    }
    for (folder, _) in orgs {
        let target = output.join(folder);
        if let Some(parent) = target.parent()
            && !parent.exists()
        {
            fs::create_dir(parent)
                .with_context(|| format!("{}: cannot create", parent.display()))?;
            undo.created.push(parent.to_owned());
        }
        if target.exists() {
            // Checked to be empty before generating; remove_dir fails if
            // something appeared in it since.
            fs::remove_dir(&target).with_context(|| {
                format!(
                    "{}: appeared while generating; not overwriting it",
                    target.display()
                )
            })?;
            undo.emptied.push(target.clone());
        }
        fs::rename(staging.join(folder), &target)
            .with_context(|| format!("{}: cannot move into place", target.display()))?;
        undo.placed.push(target);
    }
    Ok(())
}

fn write_tree(root: &Path, tree: &Tree) -> anyhow::Result<()> {
    for entry in &tree.entries {
        match entry {
            Entry::Dir(path) => {
                let path = root.join(path);
                fs::create_dir_all(&path)
                    .with_context(|| format!("{}: cannot create", path.display()))?;
            }
            Entry::File {
                path,
                contents,
                secret,
            } => {
                let path = root.join(path);
                if let Some(parent) = path.parent() {
                    fs::create_dir_all(parent)
                        .with_context(|| format!("{}: cannot create", parent.display()))?;
                }
                write_new_file(&path, contents, *secret)
                    .with_context(|| format!("{}: cannot write", path.display()))?;
            }
        }
    }
    Ok(())
}

fn write_new_file(path: &Path, contents: &[u8], secret: bool) -> std::io::Result<()> {
    use std::io::Write;
    let mut options = fs::OpenOptions::new();
    options.write(true).create_new(true);
    #[cfg(unix)]
    {
        use std::os::unix::fs::OpenOptionsExt;
        options.mode(if secret { 0o600 } else { 0o644 });
    }
    #[cfg(not(unix))]
    let _ = secret;
    let mut file = options.open(path)?;
    file.write_all(contents)?;
    file.sync_all()
}

// ---------------------------------------------------------------------------
// Reporting.

impl fmt::Display for Summary {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let count = self.orgs.len();
        // No final newline: the caller prints the summary with println!.
        write!(
            f,
            "Generated crypto material for {count} organization{} in {}:",
            plural(count),
            self.output.display()
        )?;
        let folder = |org: &OrgSummary| Path::new(org.kind.folder()).join(&org.domain);
        let id_width = self.orgs.iter().map(|o| o.msp_id.len()).max().unwrap_or(0);
        let folder_width = self
            .orgs
            .iter()
            .map(|o| folder(o).display().to_string().len())
            .max()
            .unwrap_or(0);
        for org in &self.orgs {
            let nodes = org.nodes.len();
            let noun = org.kind.node_ou();
            let users = org.users.len().saturating_sub(1);
            let users = if users == 0 {
                String::new()
            } else {
                format!(" + {users} user{}", plural(users))
            };
            write!(
                f,
                "\n  {:<id_width$}  {:<folder_width$}  {nodes} {noun}{}, Admin{users}, NodeOUs {}",
                org.msp_id,
                folder(org).display().to_string(),
                plural(nodes),
                if org.node_ous { "on" } else { "off" },
            )?;
        }
        Ok(())
    }
}

fn plural(count: usize) -> &'static str {
    if count == 1 { "" } else { "s" }
}
