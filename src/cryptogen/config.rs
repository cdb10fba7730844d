//! cryptogen's `crypto-config.yaml`, read strictly and turned into a plan.
//!
//! The format is the one `cryptogen showtemplate` prints, so an operator's
//! existing file works unchanged. Two things are stricter than cryptogen,
//! because cryptogen's silence costs hours later:
//!
//! - an unknown key (a typo such as `Domian`) is an error, where cryptogen
//!   ignores it and generates something else than intended;
//! - every name that becomes a folder or a DNS name is checked, and two
//!   orgs or nodes that would land in the same folder are an error.
//!
//! Nothing here touches the file system: [`parse`] takes the file's bytes
//! and returns either the complete plan or the first error, named by its
//! path in the file (`PeerOrgs[0].Domain: missing`).

use std::collections::HashMap;
use std::fmt;
use std::net::IpAddr;

use serde::Deserialize;
use serde::de::{self, Deserializer, Visitor};

/// Organizations one file may define, orderer and peer orgs together.
pub(super) const ORGS_MAX: usize = 100;
/// Peers or orderers one organization may have (Specs plus Template).
pub(super) const NODES_PER_ORG_MAX: usize = 1_000;
/// Users one organization may have, besides its Admin.
pub(super) const USERS_PER_ORG_MAX: u32 = 10_000;
/// Longest host or domain name (RFC 1035).
const NAME_BYTES_MAX: usize = 253;
/// Longest subject text field (C, ST, L, OU, street, postal code).
const TEXT_CHARS_MAX: usize = 128;

/// Whether an organization runs orderers or peers.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum OrgKind {
    Orderer,
    Peer,
}

impl OrgKind {
    /// The folder under the output directory that holds orgs of this kind.
    pub fn folder(self) -> &'static str {
        match self {
            Self::Orderer => "ordererOrganizations",
            Self::Peer => "peerOrganizations",
        }
    }

    /// The folder inside the org that holds its nodes.
    pub(super) fn nodes_folder(self) -> &'static str {
        match self {
            Self::Orderer => "orderers",
            Self::Peer => "peers",
        }
    }

    /// The NodeOU a node of this org carries, and the `{{.Prefix}}` of
    /// template hostnames.
    pub(super) fn node_ou(self) -> &'static str {
        match self {
            Self::Orderer => "orderer",
            Self::Peer => "peer",
        }
    }

    /// The top-level key listing orgs of this kind.
    pub(super) fn list_key(self) -> &'static str {
        match self {
            Self::Orderer => "OrdererOrgs",
            Self::Peer => "PeerOrgs",
        }
    }
}

/// One organization, fully resolved: every default applied, every template
/// rendered, every name checked.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) struct OrgPlan {
    pub kind: OrgKind,
    pub name: String,
    pub domain: String,
    pub node_ous: bool,
    pub ca: CaPlan,
    pub nodes: Vec<NodePlan>,
    /// Users besides Admin: `User1@<domain>` … `User<users>@<domain>`.
    pub users: u32,
}

/// The subject fields of an org's CA and TLS CA. The country, province,
/// locality, OU, street and postal code are also copied into every
/// certificate the CAs issue, as cryptogen does.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) struct CaPlan {
    pub common_name: String,
    pub country: String,
    pub province: String,
    pub locality: String,
    pub organizational_unit: Option<String>,
    pub street_address: Option<String>,
    pub postal_code: Option<String>,
}

/// One peer or orderer.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) struct NodePlan {
    /// The certificate CN and the node's folder name, e.g.
    /// `peer0.org1.example.com`.
    pub common_name: String,
    /// Subject alternative names of the TLS certificate: the CN, the
    /// hostname, then the configured SANS.
    pub sans: Vec<String>,
}

/// Parses and checks a whole `crypto-config.yaml`. The error is
/// `<path in the file>: <reason>`; the caller prefixes the file name.
pub(super) fn parse(text: &[u8]) -> Result<Vec<OrgPlan>, String> {
    if text.iter().all(u8::is_ascii_whitespace) {
        return Err("the file is empty; it needs OrdererOrgs and/or PeerOrgs".to_owned());
    }
    let file: FileYaml = serde_yaml::from_slice(text).map_err(|e| e.to_string())?;
    let orderer_orgs = file.orderer_orgs.unwrap_or_default();
    let peer_orgs = file.peer_orgs.unwrap_or_default();
    if orderer_orgs.is_empty() && peer_orgs.is_empty() {
        return Err("OrdererOrgs and PeerOrgs are both empty: nothing to generate".to_owned());
    }
    if orderer_orgs.len() + peer_orgs.len() > ORGS_MAX {
        return Err(format!(
            "{} organizations; at most {ORGS_MAX} may be generated at once",
            orderer_orgs.len() + peer_orgs.len()
        ));
    }

    let mut plans = Vec::new();
    // Where each MSP ID and each org folder was first defined, to report
    // duplicates against their first use.
    let mut names: HashMap<String, String> = HashMap::new();
    let mut folders: HashMap<(OrgKind, String), String> = HashMap::new();
    let orderers = orderer_orgs
        .into_iter()
        .enumerate()
        .map(|(index, org)| (index, OrgKind::Orderer, org));
    let peers = peer_orgs
        .into_iter()
        .enumerate()
        .map(|(index, org)| (index, OrgKind::Peer, org));
    for (index, kind, org) in orderers.chain(peers) {
        let at = format!("{}[{index}]", kind.list_key());
        let plan = plan_org(&at, kind, org)?;
        if let Some(first) = names.get(&plan.name) {
            return Err(format!(
                "{at}.Name: `{}` is also the Name of {first}; MSP IDs are <Name>MSP and must be unique",
                plan.name
            ));
        }
        names.insert(plan.name.clone(), at.clone());
        let folder = (kind, plan.domain.to_ascii_lowercase());
        if let Some(first) = folders.get(&folder) {
            return Err(format!(
                "{at}.Domain: `{}` is also the Domain of {first}; both would be written to {}/{}",
                plan.domain,
                kind.folder(),
                plan.domain
            ));
        }
        folders.insert(folder, at);
        plans.push(plan);
    }
    Ok(plans)
}

fn plan_org(at: &str, kind: OrgKind, org: OrgYaml) -> Result<OrgPlan, String> {
    let name = required(&format!("{at}.Name"), org.name)?;
    if name.is_empty() || name.chars().any(|c| c.is_whitespace() || c.is_control()) {
        return Err(format!(
            "{at}.Name: `{name}` must be non-empty and without spaces (the MSP ID is {name}MSP)"
        ));
    }
    let domain_field = format!("{at}.Domain");
    let domain = required(&domain_field, org.domain)?;
    check_name(&domain_field, &domain)?;

    let ca = plan_ca(&format!("{at}.CA"), &domain, org.ca.unwrap_or_default())?;

    let mut nodes: Vec<NodePlan> = Vec::new();
    // The field each node came from, to name both ends of a collision.
    let mut origins: Vec<String> = Vec::new();
    for (index, spec) in org.specs.unwrap_or_default().into_iter().enumerate() {
        let field = format!("{at}.Specs[{index}]");
        nodes.push(plan_spec(&field, &domain, spec)?);
        origins.push(field);
    }
    if let Some(template) = org.template {
        let field = format!("{at}.Template");
        let count = template.count.unwrap_or(0);
        if usize::try_from(count).map_or(true, |count| count > NODES_PER_ORG_MAX) {
            return Err(format!(
                "{field}.Count: {count} nodes; at most {NODES_PER_ORG_MAX} per organization"
            ));
        }
        let start = template.start.unwrap_or(0);
        let hostname_template = template
            .hostname
            .map(Text::into_string)
            .unwrap_or_else(|| "{{.Prefix}}{{.Index}}".to_owned());
        let sans = texts(template.sans);
        for offset in 0..count {
            let index = start
                .checked_add(offset)
                .ok_or_else(|| format!("{field}.Start: {start} + Count {count} overflows"))?;
            let hostname = render(
                &format!("{field}.Hostname"),
                &hostname_template,
                &[
                    ("Prefix", kind.node_ou().to_owned()),
                    ("Index", index.to_string()),
                    ("Domain", domain.clone()),
                ],
            )?;
            check_name(&format!("{field}.Hostname"), &hostname)?;
            nodes.push(plan_node(&field, &domain, hostname, None, &sans)?);
            origins.push(format!("{field} (node {index})"));
        }
    }
    if nodes.len() > NODES_PER_ORG_MAX {
        return Err(format!(
            "{at}: {} nodes; at most {NODES_PER_ORG_MAX} per organization",
            nodes.len()
        ));
    }
    let mut seen: HashMap<String, usize> = HashMap::new();
    for (index, node) in nodes.iter().enumerate() {
        if let Some(&first) = seen.get(&node.common_name.to_ascii_lowercase()) {
            return Err(format!(
                "{}: node `{}` is also generated by {}; each node needs its own folder",
                origins[index], node.common_name, origins[first]
            ));
        }
        seen.insert(node.common_name.to_ascii_lowercase(), index);
    }

    let users = org.users.and_then(|users| users.count).unwrap_or(0);
    if users > USERS_PER_ORG_MAX {
        return Err(format!(
            "{at}.Users.Count: {users} users; at most {USERS_PER_ORG_MAX} per organization"
        ));
    }

    Ok(OrgPlan {
        kind,
        name,
        domain,
        node_ous: org.enable_node_ous.unwrap_or(false),
        ca,
        nodes,
        users,
    })
}

fn plan_ca(at: &str, domain: &str, ca: NodeSpecYaml) -> Result<CaPlan, String> {
    if ca.sans.is_some() {
        return Err(format!(
            "{at}.SANS: a CA has no TLS certificate of its own, so SANS has no effect here; remove it"
        ));
    }
    let hostname = ca
        .hostname
        .map_or_else(|| "ca".to_owned(), Text::into_string);
    check_name(&format!("{at}.Hostname"), &hostname)?;
    let common_name = render_common_name(at, domain, &hostname, ca.common_name)?;
    let text = |field: &str, value: Option<Text>| -> Result<Option<String>, String> {
        let value = value.map(Text::into_string).filter(|v| !v.is_empty());
        if let Some(value) = &value {
            check_text(&format!("{at}.{field}"), value)?;
        }
        Ok(value)
    };
    // cryptogen treats an empty value like an absent one and falls back
    // to its defaults.
    Ok(CaPlan {
        common_name,
        country: text("Country", ca.country)?.unwrap_or_else(|| "US".to_owned()),
        province: text("Province", ca.province)?.unwrap_or_else(|| "California".to_owned()),
        locality: text("Locality", ca.locality)?.unwrap_or_else(|| "San Francisco".to_owned()),
        organizational_unit: text("OrganizationalUnit", ca.organizational_unit)?,
        street_address: text("StreetAddress", ca.street_address)?,
        postal_code: text("PostalCode", ca.postal_code)?,
    })
}

fn plan_spec(at: &str, domain: &str, spec: NodeSpecYaml) -> Result<NodePlan, String> {
    let ca_only = [
        ("Country", spec.country.is_some()),
        ("Province", spec.province.is_some()),
        ("Locality", spec.locality.is_some()),
        ("OrganizationalUnit", spec.organizational_unit.is_some()),
        ("StreetAddress", spec.street_address.is_some()),
        ("PostalCode", spec.postal_code.is_some()),
    ];
    if let Some((field, _)) = ca_only.iter().find(|(_, present)| *present) {
        return Err(format!(
            "{at}.{field}: only the CA entry takes subject fields; node certificates copy them from the CA"
        ));
    }
    let hostname = required(&format!("{at}.Hostname"), spec.hostname)?;
    check_name(&format!("{at}.Hostname"), &hostname)?;
    plan_node(at, domain, hostname, spec.common_name, &texts(spec.sans))
}

/// Applies cryptogen's node rules: CN defaults to `<hostname>.<domain>`,
/// and the TLS SANs are the CN, the hostname, then the rendered SANS.
fn plan_node(
    at: &str,
    domain: &str,
    hostname: String,
    common_name: Option<Text>,
    sans: &[String],
) -> Result<NodePlan, String> {
    let common_name = render_common_name(at, domain, &hostname, common_name)?;
    let mut rendered = vec![common_name.clone(), hostname.clone()];
    for (index, san) in sans.iter().enumerate() {
        let field = format!("{at}.SANS[{index}]");
        let san = render(
            &field,
            san,
            &[
                ("Hostname", hostname.clone()),
                ("Domain", domain.to_owned()),
                ("CommonName", common_name.clone()),
            ],
        )?;
        check_san(&field, &san)?;
        rendered.push(san);
    }
    Ok(NodePlan {
        common_name,
        sans: rendered,
    })
}

fn render_common_name(
    at: &str,
    domain: &str,
    hostname: &str,
    common_name: Option<Text>,
) -> Result<String, String> {
    let field = format!("{at}.CommonName");
    let template = common_name
        .map(Text::into_string)
        .unwrap_or_else(|| "{{.Hostname}}.{{.Domain}}".to_owned());
    let common_name = render(
        &field,
        &template,
        &[
            ("Hostname", hostname.to_owned()),
            ("Domain", domain.to_owned()),
        ],
    )?;
    check_name(&field, &common_name)?;
    Ok(common_name)
}

/// Renders the subset of Go templates cryptogen's files use: `{{.Field}}`
/// (spaces allowed inside the braces) with the fields of `vars`.
pub(super) fn render(
    field: &str,
    template: &str,
    vars: &[(&str, String)],
) -> Result<String, String> {
    let mut out = String::with_capacity(template.len());
    let mut rest = template;
    while let Some(open) = rest.find("{{") {
        out.push_str(&rest[..open]);
        let after = &rest[open + 2..];
        let close = after
            .find("}}")
            .ok_or_else(|| format!("{field}: `{template}` has an unclosed `{{{{`"))?;
        let action = after[..close].trim();
        let allowed = || {
            vars.iter()
                .map(|(name, _)| format!(".{name}"))
                .collect::<Vec<_>>()
                .join(", ")
        };
        let value = action
            .strip_prefix('.')
            .and_then(|name| vars.iter().find(|(var, _)| *var == name))
            .map(|(_, value)| value)
            .ok_or_else(|| {
                format!(
                    "{field}: `{{{{{action}}}}}` is not supported in `{template}`; use one of {}",
                    allowed()
                )
            })?;
        out.push_str(value);
        rest = &after[close + 2..];
    }
    out.push_str(rest);
    Ok(out)
}

fn required(field: &str, value: Option<Text>) -> Result<String, String> {
    value
        .map(Text::into_string)
        .ok_or_else(|| format!("{field}: missing"))
}

/// A host, domain or common name: it becomes a folder name, a file name
/// and a DNS SAN, so only DNS-safe characters are allowed.
fn check_name(field: &str, value: &str) -> Result<(), String> {
    if value.is_empty() {
        return Err(format!("{field}: empty"));
    }
    if value.len() > NAME_BYTES_MAX {
        return Err(format!(
            "{field}: `{value}` is longer than {NAME_BYTES_MAX} bytes"
        ));
    }
    if value.starts_with(['.', '-']) || value.ends_with('.') || value.contains("..") {
        return Err(format!(
            "{field}: `{value}` is not a host name (empty label or leading '-')"
        ));
    }
    if !value
        .chars()
        .all(|c| c.is_ascii_alphanumeric() || matches!(c, '.' | '-' | '_'))
    {
        return Err(format!(
            "{field}: `{value}` may only contain letters, digits, '.', '-' and '_' (it names a folder and a DNS name)"
        ));
    }
    Ok(())
}

/// A SAN is an IP address or a DNS name (wildcards allowed), as Go's x509
/// decides: what parses as an IP address is one.
fn check_san(field: &str, value: &str) -> Result<(), String> {
    if value.parse::<IpAddr>().is_ok() {
        return Ok(());
    }
    if value.is_empty()
        || value.len() > NAME_BYTES_MAX
        || !value.chars().all(|c| c.is_ascii_graphic())
    {
        return Err(format!(
            "{field}: `{value}` is neither an IP address nor a DNS name"
        ));
    }
    Ok(())
}

fn check_text(field: &str, value: &str) -> Result<(), String> {
    if value.chars().count() > TEXT_CHARS_MAX || value.chars().any(char::is_control) {
        return Err(format!(
            "{field}: must be at most {TEXT_CHARS_MAX} characters without control characters"
        ));
    }
    Ok(())
}

fn texts(values: Option<Vec<Text>>) -> Vec<String> {
    values
        .unwrap_or_default()
        .into_iter()
        .map(Text::into_string)
        .collect()
}

// The YAML schema. Every field is optional here so that a missing one is
// reported by `plan_org` with its full path; unknown keys are rejected.

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct FileYaml {
    #[serde(rename = "OrdererOrgs")]
    orderer_orgs: Option<Vec<OrgYaml>>,
    #[serde(rename = "PeerOrgs")]
    peer_orgs: Option<Vec<OrgYaml>>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "PascalCase")]
struct OrgYaml {
    name: Option<Text>,
    domain: Option<Text>,
    #[serde(rename = "EnableNodeOUs")]
    enable_node_ous: Option<bool>,
    #[serde(rename = "CA")]
    ca: Option<NodeSpecYaml>,
    template: Option<TemplateYaml>,
    specs: Option<Vec<NodeSpecYaml>>,
    users: Option<UsersYaml>,
}

/// cryptogen's `NodeSpec`, used both for `CA` and for `Specs` entries.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "PascalCase")]
struct NodeSpecYaml {
    hostname: Option<Text>,
    common_name: Option<Text>,
    country: Option<Text>,
    province: Option<Text>,
    locality: Option<Text>,
    organizational_unit: Option<Text>,
    street_address: Option<Text>,
    postal_code: Option<Text>,
    #[serde(rename = "SANS")]
    sans: Option<Vec<Text>>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "PascalCase")]
struct TemplateYaml {
    count: Option<u32>,
    start: Option<u32>,
    hostname: Option<Text>,
    #[serde(rename = "SANS")]
    sans: Option<Vec<Text>>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "PascalCase")]
struct UsersYaml {
    count: Option<u32>,
}

/// A YAML scalar read as text. cryptogen (Go, yaml.v2) reads `PostalCode:
/// 94105` into a string field; serde would reject the integer.
#[derive(Debug)]
struct Text(String);

impl Text {
    fn into_string(self) -> String {
        self.0
    }
}

impl<'de> Deserialize<'de> for Text {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        struct TextVisitor;
        impl Visitor<'_> for TextVisitor {
            type Value = Text;
            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("a string")
            }
            fn visit_str<E: de::Error>(self, value: &str) -> Result<Text, E> {
                Ok(Text(value.to_owned()))
            }
            fn visit_string<E: de::Error>(self, value: String) -> Result<Text, E> {
                Ok(Text(value))
            }
            fn visit_i64<E: de::Error>(self, value: i64) -> Result<Text, E> {
                Ok(Text(value.to_string()))
            }
            fn visit_u64<E: de::Error>(self, value: u64) -> Result<Text, E> {
                Ok(Text(value.to_string()))
            }
            fn visit_bool<E: de::Error>(self, value: bool) -> Result<Text, E> {
                Ok(Text(value.to_string()))
            }
        }
        deserializer.deserialize_any(TextVisitor)
    }
}
