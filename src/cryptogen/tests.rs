//! Tests of `weft crypto generate`: the output loads as MSPs with the right
//! roles, TLS material chains and names its hosts, certificates have the
//! shape of cryptogen's (compared with real cryptogen output), bad configs
//! name the field and write nothing, existing orgs are never overwritten.

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};
use std::process::Command;

use weft_msp::{Certificate, MspManager, NodeRole};
use x509_parser::certificate::X509Certificate;
use x509_parser::extensions::GeneralName;

use super::*;

/// Two orgs exercising Specs (with templated SANS) and Template.
const SMALL: &str = r#"
OrdererOrgs:
  - Name: Orderer
    Domain: example.com
    EnableNodeOUs: true
    Specs:
      - Hostname: orderer0
        SANS: [localhost, "{{.Hostname}}.internal", 127.0.0.1]
      - Hostname: orderer1
PeerOrgs:
  - Name: Org1
    Domain: org1.example.com
    EnableNodeOUs: true
    Template:
      Count: 2
      SANS: [localhost, 127.0.0.1]
    Users:
      Count: 1
"#;

/// Writes `yaml` to `<tempdir>/crypto.yaml` and generates into
/// `<tempdir>/out`.
fn generate_yaml(yaml: &str) -> (tempfile::TempDir, PathBuf, anyhow::Result<Summary>) {
    let dir = tempfile::tempdir().unwrap();
    let config = dir.path().join("crypto.yaml");
    fs::write(&config, yaml).unwrap();
    let out = dir.path().join("out");
    let result = generate(&config, &out);
    (dir, out, result)
}

fn read_cert(path: &Path) -> Certificate {
    Certificate::from_pem(&fs::read(path).unwrap())
        .unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}

fn with_x509<T>(path: &Path, f: impl FnOnce(&X509Certificate<'_>) -> T) -> T {
    let bytes = fs::read(path).unwrap();
    let (_, pem) = x509_parser::pem::parse_x509_pem(&bytes).unwrap();
    let cert = pem.parse_x509().unwrap();
    f(&cert)
}

/// The SANs of a certificate as strings, in order.
fn sans(path: &Path) -> Vec<String> {
    with_x509(path, |cert| {
        let Some(extension) = cert.subject_alternative_name().unwrap() else {
            return Vec::new();
        };
        extension
            .value
            .general_names
            .iter()
            .map(|name| match name {
                GeneralName::DNSName(dns) => (*dns).to_owned(),
                GeneralName::IPAddress(ip) => {
                    let octets: [u8; 4] = (*ip).try_into().unwrap();
                    std::net::Ipv4Addr::from(octets).to_string()
                }
                other => panic!("unexpected SAN {other:?}"),
            })
            .collect()
    })
}

/// Every local MSP of an org with the role its identity must have.
fn identities(org: &OrgSummary) -> Vec<(PathBuf, NodeRole)> {
    let node_role = match org.kind {
        OrgKind::Orderer => NodeRole::Orderer,
        OrgKind::Peer => NodeRole::Peer,
    };
    let nodes = org.nodes.iter().map(|cn| {
        let folder = org.folder.join(org.kind.nodes_folder()).join(cn);
        (folder, node_role)
    });
    let users = org.users.iter().map(|cn| {
        let role = if cn.starts_with("Admin@") {
            NodeRole::Admin
        } else {
            NodeRole::Client
        };
        (org.folder.join("users").join(cn), role)
    });
    nodes.chain(users).collect()
}

/// Goal: every MSP folder written loads with weft's MSP reader, every
/// signer's identity validates against its org's MSP with the NodeOU role
/// of its kind, and its signatures verify.
#[test]
fn every_msp_folder_loads_and_each_identity_has_its_role() {
    let (_dir, _out, summary) = generate_yaml(SMALL);
    let summary = summary.unwrap();
    let now = weft_msp::now();

    let ids: Vec<&str> = summary.orgs.iter().map(|o| o.msp_id.as_str()).collect();
    assert_eq!(ids, ["OrdererMSP", "Org1MSP"]);
    assert_eq!(
        summary.orgs[0].nodes,
        ["orderer0.example.com", "orderer1.example.com"]
    );
    assert_eq!(summary.orgs[0].users, ["Admin@example.com"]);
    assert_eq!(
        summary.orgs[1].nodes,
        ["peer0.org1.example.com", "peer1.org1.example.com"]
    );
    assert_eq!(
        summary.orgs[1].users,
        ["Admin@org1.example.com", "User1@org1.example.com"]
    );

    let mut checked = 0;
    for org in &summary.orgs {
        let org_msp = weft_msp::folder::load(&org.folder.join("msp"), &org.msp_id).unwrap();
        assert!(
            org_msp.signer.is_none(),
            "the org MSP has no signing identity"
        );
        let org_msp = org_msp.msp().unwrap();
        assert!(org_msp.node_ous_enabled());
        let manager = MspManager::new([org_msp]);
        let ca = read_cert(
            &org.folder
                .join("ca")
                .join(format!("ca.{}-cert.pem", org.domain)),
        );
        for (folder, role) in identities(org) {
            let local = weft_msp::folder::load(&folder.join("msp"), &org.msp_id)
                .unwrap_or_else(|e| panic!("{}: {e}", folder.display()));
            let signer = local.signer.as_ref().unwrap();
            assert_eq!(signer.certificate().authority_key_id(), ca.subject_key_id());
            let identity = manager
                .deserialize(signer.serialized_identity(), now)
                .unwrap_or_else(|e| panic!("{}: {e}", folder.display()));
            assert_eq!(identity.node_role(), Some(role), "{}", folder.display());
            assert_eq!(identity.is_admin(), role == NodeRole::Admin);

            let message = format!("signed by {}", folder.display());
            let signature = signer.sign(message.as_bytes()).unwrap();
            identity.verify(message.as_bytes(), &signature).unwrap();
            assert!(identity.verify(b"another message", &signature).is_err());

            // A node's own MSP folder also accepts its identity.
            let own = MspManager::new([local.msp().unwrap()]);
            own.deserialize(signer.serialized_identity(), now).unwrap();
            checked += 1;
        }
    }
    // 2 orderers + Admin, 2 peers + Admin + User1.
    assert_eq!(checked, 7);
}

/// Goal: each node's and user's TLS certificate is issued by the org's TLS
/// CA (not its signing CA), `tls/ca.crt` is that CA, the key matches, and
/// node certificates name the CN, the hostname and the configured SANS.
#[test]
fn tls_certificates_chain_to_the_tls_ca_and_carry_the_sans() {
    let (_dir, out, summary) = generate_yaml(SMALL);
    let summary = summary.unwrap();
    let orderers = out.join("ordererOrganizations/example.com");
    let peers = out.join("peerOrganizations/org1.example.com");

    assert_eq!(
        sans(&orderers.join("orderers/orderer0.example.com/tls/server.crt")),
        [
            "orderer0.example.com",
            "orderer0",
            "localhost",
            "orderer0.internal",
            "127.0.0.1"
        ]
    );
    assert_eq!(
        sans(&orderers.join("orderers/orderer1.example.com/tls/server.crt")),
        ["orderer1.example.com", "orderer1"]
    );
    assert_eq!(
        sans(&peers.join("peers/peer1.org1.example.com/tls/server.crt")),
        ["peer1.org1.example.com", "peer1", "localhost", "127.0.0.1"]
    );
    // cryptogen gives user TLS certificates no SANs.
    assert!(sans(&peers.join("users/User1@org1.example.com/tls/client.crt")).is_empty());

    for org in &summary.orgs {
        let tls_ca_path = org
            .folder
            .join("tlsca")
            .join(format!("tlsca.{}-cert.pem", org.domain));
        let tls_ca = read_cert(&tls_ca_path);
        let ca = read_cert(
            &org.folder
                .join("ca")
                .join(format!("ca.{}-cert.pem", org.domain)),
        );
        assert!(tls_ca.is_ca() && tls_ca.is_self_signed());
        for (folder, role) in identities(org) {
            let (cert_name, key_name) = if matches!(role, NodeRole::Admin | NodeRole::Client) {
                ("client.crt", "client.key")
            } else {
                ("server.crt", "server.key")
            };
            let tls = folder.join("tls");
            let cert_pem = fs::read(tls.join(cert_name)).unwrap();
            let cert = Certificate::from_pem(&cert_pem).unwrap();
            assert!(cert.is_issued_by(&tls_ca), "{}", folder.display());
            assert!(!cert.is_issued_by(&ca), "{}", folder.display());
            assert_eq!(cert.authority_key_id(), tls_ca.subject_key_id());
            assert_eq!(
                cert.subject_key_id(),
                None,
                "cryptogen leaves leaves without an SKI"
            );
            assert!(!cert.is_ca());
            assert_eq!(
                fs::read(tls.join("ca.crt")).unwrap(),
                fs::read(&tls_ca_path).unwrap()
            );
            // The key is the certificate's key.
            let key = fs::read(tls.join(key_name)).unwrap();
            weft_msp::Signer::from_pem(&org.msp_id, &cert_pem, &key, "tls").unwrap();
            // TLS certificates carry no NodeOU.
            assert!(cert.organizational_units().is_empty());
        }
    }
}

/// Goal: generating from the config that produced the Fabric 2.5 fixtures
/// gives the same files, and certificates identical to cryptogen's in
/// everything but keys, serials, dates and signatures: subject and issuer
/// bytes, extensions (order, criticality, values), lifetime, key format.
#[test]
fn output_matches_real_cryptogen_output() {
    let fixtures = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/fabric-2.5");
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("out");
    generate(&fixtures.join("config/crypto-config.yaml"), &out).unwrap();
    let expected_root = fixtures.join("crypto");

    let ours = relative_files(&out);
    // The fixture keeps empty admincerts/ folders in git with a `.keep`.
    let theirs: BTreeSet<PathBuf> = relative_files(&expected_root)
        .into_iter()
        .filter(|p| p.file_name().is_some_and(|n| n != ".keep"))
        .collect();
    assert_eq!(ours, theirs);
    let admincerts =
        out.join("peerOrganizations/org1.example.com/peers/peer0.org1.example.com/msp/admincerts");
    assert!(
        admincerts.is_dir(),
        "admincerts/ exists, empty, as cryptogen leaves it"
    );

    for relative in &ours {
        let (mine, expected) = (out.join(relative), expected_root.join(relative));
        let name = relative.file_name().unwrap().to_string_lossy().into_owned();
        if name == "config.yaml" {
            assert_eq!(
                fs::read(&mine).unwrap(),
                fs::read(&expected).unwrap(),
                "{name}"
            );
        } else if name == "priv_sk" || name.ends_with(".key") {
            compare_keys(&mine, &expected);
        } else {
            compare_certificates(&mine, &expected);
        }
    }
}

fn relative_files(root: &Path) -> BTreeSet<PathBuf> {
    fn walk(root: &Path, dir: &Path, files: &mut BTreeSet<PathBuf>) {
        for entry in fs::read_dir(dir).unwrap() {
            let path = entry.unwrap().path();
            if path.is_dir() {
                walk(root, &path, files);
            } else {
                files.insert(path.strip_prefix(root).unwrap().to_owned());
            }
        }
    }
    let mut files = BTreeSet::new();
    walk(root, root, &mut files);
    files
}

fn compare_keys(mine: &Path, expected: &Path) {
    let der = |path: &Path| {
        let bytes = fs::read(path).unwrap();
        let (_, pem) = x509_parser::pem::parse_x509_pem(&bytes).unwrap();
        assert_eq!(pem.label, "PRIVATE KEY", "{}", path.display());
        pem.contents
    };
    let (mine_der, expected_der) = (der(mine), der(expected));
    assert_eq!(mine_der.len(), expected_der.len(), "{}", mine.display());
    // PKCS#8 around an ECPrivateKey: everything but the 32 private bytes
    // (36..68) and the public point (74..) is structure and must match.
    assert_eq!(mine_der[..36], expected_der[..36], "{}", mine.display());
    assert_eq!(mine_der[68..74], expected_der[68..74], "{}", mine.display());
    #[cfg(unix)]
    {
        use std::os::unix::fs::PermissionsExt;
        let mode = fs::metadata(mine).unwrap().permissions().mode();
        assert_eq!(mode & 0o777, 0o600, "{}", mine.display());
    }
}

fn compare_certificates(mine: &Path, expected: &Path) {
    let text = fs::read_to_string(mine).unwrap();
    assert!(text.starts_with("-----BEGIN CERTIFICATE-----\n"));
    assert!(text.ends_with("-----END CERTIFICATE-----\n"));
    with_x509(mine, |ours| {
        with_x509(expected, |theirs| {
            let at = mine.display();
            assert_eq!(ours.version(), theirs.version(), "{at}");
            assert_eq!(
                ours.subject().as_raw(),
                theirs.subject().as_raw(),
                "{at}: subject"
            );
            assert_eq!(
                ours.issuer().as_raw(),
                theirs.issuer().as_raw(),
                "{at}: issuer"
            );
            assert_eq!(
                ours.signature_algorithm, theirs.signature_algorithm,
                "{at}: signature algorithm"
            );
            assert_eq!(
                ours.public_key().algorithm,
                theirs.public_key().algorithm,
                "{at}: key algorithm"
            );
            let lifetime = |c: &X509Certificate<'_>| {
                c.validity().not_after.timestamp() - c.validity().not_before.timestamp()
            };
            assert_eq!(lifetime(ours), lifetime(theirs), "{at}: lifetime");
            assert!((15..=17).contains(&ours.raw_serial().len()), "{at}: serial");

            let shape = |c: &X509Certificate<'_>| {
                c.extensions()
                    .iter()
                    .map(|e| (e.oid.to_id_string(), e.critical))
                    .collect::<Vec<_>>()
            };
            assert_eq!(shape(ours), shape(theirs), "{at}: extensions");
            for (a, b) in ours.extensions().iter().zip(theirs.extensions()) {
                let id = a.oid.to_id_string();
                if id == "2.5.29.14" || id == "2.5.29.35" {
                    // Key identifiers differ with the keys; same length.
                    assert_eq!(a.value.len(), b.value.len(), "{at}: {id}");
                } else {
                    assert_eq!(a.value, b.value, "{at}: extension {id}");
                }
            }

            // SKI = SHA-256 of the uncompressed point, for both.
            for cert in [ours, theirs] {
                let point = &cert.public_key().subject_public_key.data;
                let ski = cert
                    .extensions()
                    .iter()
                    .find_map(|e| match e.parsed_extension() {
                        x509_parser::extensions::ParsedExtension::SubjectKeyIdentifier(id) => {
                            Some(id.0.to_vec())
                        }
                        _ => None,
                    });
                if let Some(ski) = ski {
                    let digest = ring::digest::digest(&ring::digest::SHA256, point);
                    assert_eq!(ski, digest.as_ref(), "{at}: SKI");
                }
            }
            // weft signs certificates low-S (cryptogen does not normalise,
            // so its certificates are low-S only about half of the time).
            assert_eq!(
                weft_msp::crypto::has_low_s(&ours.signature_value.data),
                Ok(true),
                "{at}: signature is not low-S"
            );
        });
    });
}

/// Goal: a config error names the file and the field, and nothing at all
/// is written, not even for the orgs before the bad one.
#[test]
fn bad_configs_name_the_field_and_write_nothing() {
    let good_orderer = "OrdererOrgs:\n  - Name: Orderer\n    Domain: example.com\n    Specs:\n      - Hostname: orderer\n";
    let cases: &[(&str, &str)] = &[
        (
            "PeerOrgs:\n  - Name: Org1\n    Domian: org1.example.com\n",
            "crypto.yaml: PeerOrgs[0]: unknown field `Domian`",
        ),
        (
            "PeerOrgs:\n  - Name: Org1\n    EnableNodeOUs: true\n",
            "crypto.yaml: PeerOrgs[0].Domain: missing",
        ),
        (
            "PeerOrgs:\n  - Domain: org1.example.com\n",
            "crypto.yaml: PeerOrgs[0].Name: missing",
        ),
        (
            "OrdererOrgs:\n  - Name: O\n    Domain: example.com\n    Specs:\n      - CommonName: x\n",
            "crypto.yaml: OrdererOrgs[0].Specs[0].Hostname: missing",
        ),
        (
            "PeerOrgs:\n  - Name: Org1\n    Domain: org1.example.com\n    Template:\n      Cuont: 2\n",
            "crypto.yaml: PeerOrgs[0].Template: unknown field `Cuont`",
        ),
        (
            "PeerOrgs:\n  - Name: Org1\n    Domain: org1.example.com\n    Template:\n      Count: 1\n      Hostname: \"{{.Host}}{{.Index}}\"\n",
            "crypto.yaml: PeerOrgs[0].Template.Hostname: `{{.Host}}` is not supported",
        ),
        (
            "PeerOrgs:\n  - Name: Org1\n    Domain: org1.example.com\n    Specs:\n      - Hostname: peer0\n        SANS: [\"two words\"]\n",
            "crypto.yaml: PeerOrgs[0].Specs[0].SANS[0]: `two words` is neither",
        ),
        (
            "PeerOrgs:\n  - Name: Org1\n    Domain: org1.example.com\n    Specs:\n      - Hostname: ../peer0\n",
            "crypto.yaml: PeerOrgs[0].Specs[0].Hostname: `../peer0`",
        ),
        (
            "PeerOrgs:\n  - Name: Org1\n    Domain: org1.example.com\n    Specs:\n      - Hostname: peer0\n    Template:\n      Count: 1\n",
            "crypto.yaml: PeerOrgs[0].Template (node 0): node `peer0.org1.example.com` is also generated by PeerOrgs[0].Specs[0]",
        ),
        (
            "PeerOrgs:\n  - Name: Org1\n    Domain: org1.example.com\n    Specs:\n      - Hostname: peer0\n        Country: DE\n",
            "crypto.yaml: PeerOrgs[0].Specs[0].Country: only the CA entry",
        ),
        (
            "PeerOrgs:\n  - Name: Org1\n    Domain: org1.example.com\n    Users:\n      Count: 10001\n",
            "crypto.yaml: PeerOrgs[0].Users.Count: 10001 users",
        ),
        (
            "PeerOrgs:\n  - Name: Org1\n    Domain: org1.example.com\n  - Name: Org2\n    Domain: ORG1.example.com\n",
            "crypto.yaml: PeerOrgs[1].Domain: `ORG1.example.com` is also the Domain of PeerOrgs[0]",
        ),
        (
            "PeerOrgs:\n  - Name: Org1\n    Domain: org1.example.com\n  - Name: Org1\n    Domain: org2.example.com\n",
            "crypto.yaml: PeerOrgs[1].Name: `Org1` is also the Name of PeerOrgs[0]",
        ),
        ("\n", "crypto.yaml: the file is empty"),
        (
            "PeerOrgs: []\n",
            "crypto.yaml: OrdererOrgs and PeerOrgs are both empty",
        ),
    ];
    for (yaml, expected) in cases {
        // A valid orderer org first: it must not be written either.
        let yaml = if yaml.starts_with("PeerOrgs:\n  - Name: Org1") {
            format!("{good_orderer}{yaml}")
        } else {
            (*yaml).to_owned()
        };
        let (_dir, out, result) = generate_yaml(&yaml);
        let error = format!("{:#}", result.unwrap_err());
        assert!(
            error.contains(expected),
            "config:\n{yaml}\nerror: {error}\nexpected: {expected}"
        );
        assert!(!out.exists(), "nothing may be written for:\n{yaml}");
    }

    // An unreadable config names the file.
    let dir = tempfile::tempdir().unwrap();
    let missing = dir.path().join("absent.yaml");
    let error = generate(&missing, &dir.path().join("out")).unwrap_err();
    assert!(
        format!("{error:#}").contains("absent.yaml: cannot read"),
        "{error:#}"
    );
}

/// Goal: a second run never replaces an org's keys: it fails naming the
/// existing folder, writes none of the other orgs, and leaves no staging
/// folder behind. An existing empty folder is filled.
#[test]
fn existing_org_folders_are_never_overwritten() {
    let (dir, out, first) = generate_yaml(SMALL);
    first.unwrap();
    let key = out.join(
        "peerOrganizations/org1.example.com/peers/peer0.org1.example.com/msp/keystore/priv_sk",
    );
    let key_before = fs::read(&key).unwrap();

    let config = dir.path().join("crypto.yaml");
    let with_org2 = format!("{SMALL}  - Name: Org2\n    Domain: org2.example.com\n");
    fs::write(&config, with_org2).unwrap();
    let error = format!("{:#}", generate(&config, &out).unwrap_err());
    let existing = out.join("ordererOrganizations/example.com");
    assert!(
        error.contains(&format!("{}: already exists", existing.display())),
        "{error}"
    );
    assert_eq!(fs::read(&key).unwrap(), key_before);
    assert!(!out.join("peerOrganizations/org2.example.com").exists());
    let top: BTreeSet<String> = fs::read_dir(&out)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    assert_eq!(
        top,
        BTreeSet::from([
            "ordererOrganizations".to_owned(),
            "peerOrganizations".to_owned()
        ])
    );

    // An empty org folder (say, a mount point made in advance) is used.
    let fresh = dir.path().join("fresh");
    fs::create_dir_all(fresh.join("peerOrganizations/org2.example.com")).unwrap();
    fs::write(
        &config,
        "PeerOrgs:\n  - Name: Org2\n    Domain: org2.example.com\n",
    )
    .unwrap();
    generate(&config, &fresh).unwrap();
    assert!(
        fresh
            .join("peerOrganizations/org2.example.com/msp/cacerts/ca.org2.example.com-cert.pem")
            .is_file()
    );
    assert_eq!(
        fs::read_dir(&fresh).unwrap().count(),
        1,
        "no staging folder is left"
    );
}

/// Goal: OpenSSL, an independent X.509 implementation, accepts the chains
/// in strict mode, with TLS purposes checked.
#[test]
fn openssl_verifies_generated_certificates() {
    if Command::new("openssl").arg("version").output().is_err() {
        eprintln!("SKIPPED openssl_verifies_generated_certificates: `openssl` is not on PATH");
        return;
    }
    let (_dir, out, summary) = generate_yaml(SMALL);
    summary.unwrap();
    let org = out.join("peerOrganizations/org1.example.com");
    let ca = org.join("ca/ca.org1.example.com-cert.pem");
    let tls_ca = org.join("tlsca/tlsca.org1.example.com-cert.pem");
    let checks = [
        (
            &ca,
            org.join("peers/peer0.org1.example.com/msp/signcerts/peer0.org1.example.com-cert.pem"),
            None,
        ),
        (
            &ca,
            org.join("users/Admin@org1.example.com/msp/signcerts/Admin@org1.example.com-cert.pem"),
            None,
        ),
        (
            &tls_ca,
            org.join("peers/peer0.org1.example.com/tls/server.crt"),
            Some("sslserver"),
        ),
        (
            &tls_ca,
            org.join("peers/peer0.org1.example.com/tls/server.crt"),
            Some("sslclient"),
        ),
        (
            &tls_ca,
            org.join("users/User1@org1.example.com/tls/client.crt"),
            Some("sslclient"),
        ),
    ];
    for (ca, cert, purpose) in checks {
        let mut command = Command::new("openssl");
        command.args(["verify", "-x509_strict", "-CAfile"]).arg(ca);
        if let Some(purpose) = purpose {
            command.args(["-purpose", purpose]);
        }
        let result = command.arg(&cert).output().unwrap();
        let stdout = String::from_utf8_lossy(&result.stdout);
        assert!(
            result.status.success() && stdout.contains(": OK"),
            "{}: {stdout}{}",
            cert.display(),
            String::from_utf8_lossy(&result.stderr)
        );
    }
    // A certificate of the other CA does not verify.
    let wrong = Command::new("openssl")
        .args(["verify", "-CAfile"])
        .arg(&tls_ca)
        .arg(org.join("peers/peer0.org1.example.com/msp/signcerts/peer0.org1.example.com-cert.pem"))
        .output()
        .unwrap();
    assert!(!wrong.status.success());
    // The keys are PKCS#8 that OpenSSL reads.
    let key = Command::new("openssl")
        .args(["pkey", "-noout", "-in"])
        .arg(org.join("peers/peer0.org1.example.com/msp/keystore/priv_sk"))
        .output()
        .unwrap();
    assert!(
        key.status.success(),
        "{}",
        String::from_utf8_lossy(&key.stderr)
    );
}

/// Goal: without NodeOUs, the Admin is an admin through `admincerts/` (as in
/// cryptogen) and there is no `config.yaml`; CA subject fields reach the
/// issued certificates; with NodeOUs and a CA OU, identities carry both OUs
/// and still classify.
#[test]
fn ca_fields_and_node_ous_off_follow_cryptogen() {
    let yaml = r#"
PeerOrgs:
  - Name: Org2
    Domain: org2.example.com
    CA:
      Country: DE
      Province: Berlin
      Locality: Berlin
      OrganizationalUnit: Ledger Team
      StreetAddress: Unter den Linden 1
      PostalCode: 10117
    Specs:
      - Hostname: peer0
        CommonName: "p0.{{.Domain}}"
    Users:
      Count: 2
  - Name: Org3
    Domain: org3.example.com
    EnableNodeOUs: true
    CA:
      Hostname: authority
      OrganizationalUnit: Ledger Team
    Template:
      Count: 1
      Start: 5
      Hostname: "node{{ .Index }}"
"#;
    let (_dir, out, summary) = generate_yaml(yaml);
    let summary = summary.unwrap();
    let now = weft_msp::now();

    let org2 = &summary.orgs[0];
    assert_eq!(org2.nodes, ["p0.org2.example.com"]);
    assert!(!org2.folder.join("msp/config.yaml").exists());
    let admin_cert = fs::read(
        org2.folder
            .join("users/Admin@org2.example.com/msp/signcerts/Admin@org2.example.com-cert.pem"),
    )
    .unwrap();
    for msp in [
        "msp",
        "peers/p0.org2.example.com/msp",
        "users/Admin@org2.example.com/msp",
    ] {
        let copy = org2
            .folder
            .join(msp)
            .join("admincerts/Admin@org2.example.com-cert.pem");
        assert_eq!(fs::read(&copy).unwrap(), admin_cert, "{msp}");
    }
    // A user's own MSP lists the user, as cryptogen leaves it.
    let user1 = org2.folder.join("users/User1@org2.example.com/msp");
    assert_eq!(
        fs::read(user1.join("admincerts/User1@org2.example.com-cert.pem")).unwrap(),
        fs::read(user1.join("signcerts/User1@org2.example.com-cert.pem")).unwrap()
    );

    let manager = MspManager::new([weft_msp::folder::load(&org2.folder.join("msp"), "Org2MSP")
        .unwrap()
        .msp()
        .unwrap()]);
    for (user, admin) in [
        ("Admin@org2.example.com", true),
        ("User2@org2.example.com", false),
    ] {
        let local =
            weft_msp::folder::load(&org2.folder.join("users").join(user).join("msp"), "Org2MSP")
                .unwrap();
        let identity = manager
            .deserialize(local.signer.as_ref().unwrap().serialized_identity(), now)
            .unwrap();
        assert_eq!(identity.is_admin(), admin, "{user}");
        assert_eq!(identity.node_role(), None);
    }
    let subject = |path: &Path| with_x509(path, |c| c.subject().to_string());
    assert_eq!(
        subject(&org2.folder.join("ca/ca.org2.example.com-cert.pem")),
        "C=DE, ST=Berlin, L=Berlin, streetAddress=Unter den Linden 1, postalCode=10117, O=org2.example.com, OU=Ledger Team, CN=ca.org2.example.com"
    );
    assert_eq!(
        subject(&org2.folder.join("peers/p0.org2.example.com/tls/server.crt")),
        "C=DE, ST=Berlin, L=Berlin, streetAddress=Unter den Linden 1, postalCode=10117, OU=Ledger Team, CN=p0.org2.example.com"
    );

    let org3 = &summary.orgs[1];
    assert_eq!(org3.nodes, ["node5.org3.example.com"]);
    assert!(
        org3.folder
            .join("tlsca/tlsauthority.org3.example.com-cert.pem")
            .is_file()
    );
    let manager = MspManager::new([weft_msp::folder::load(&org3.folder.join("msp"), "Org3MSP")
        .unwrap()
        .msp()
        .unwrap()]);
    for (folder, role) in identities(org3) {
        let local = weft_msp::folder::load(&folder.join("msp"), "Org3MSP").unwrap();
        let signer = local.signer.as_ref().unwrap();
        assert_eq!(
            signer.certificate().organizational_units(),
            ["Ledger Team".to_owned(), format!("{role:?}").to_lowercase()]
        );
        let identity = manager
            .deserialize(signer.serialized_identity(), now)
            .unwrap();
        assert_eq!(identity.node_role(), Some(role));
    }
    assert!(out.join("peerOrganizations").is_dir());
}

/// Goal: the summary the CLI prints lists each org's MSP ID, folder and
/// counts.
#[test]
fn summary_lists_each_org() {
    let (_dir, out, summary) = generate_yaml(SMALL);
    let text = summary.unwrap().to_string();
    assert_eq!(
        text,
        format!(
            "Generated crypto material for 2 organizations in {}:\n\
             \x20 OrdererMSP  ordererOrganizations/example.com    2 orderers, Admin, NodeOUs on\n\
             \x20 Org1MSP     peerOrganizations/org1.example.com  2 peers, Admin + 1 user, NodeOUs on",
            out.display()
        )
    );
}

/// Goal: weft's default `config/crypto.yaml` is valid and describes the
/// local network: 3 orderers, two peer orgs with 2 peers and 1 user each,
/// NodeOUs on, localhost SANs.
#[test]
fn default_config_describes_the_local_network() {
    let text = include_str!("../../config/crypto.yaml");
    let plans = config::parse(text.as_bytes()).unwrap();
    type Row<'a> = (OrgKind, &'a str, &'a str, Vec<&'a str>, u32, bool);
    let summary: Vec<Row<'_>> = plans
        .iter()
        .map(|p| {
            (
                p.kind,
                p.name.as_str(),
                p.domain.as_str(),
                p.nodes.iter().map(|n| n.common_name.as_str()).collect(),
                p.users,
                p.node_ous,
            )
        })
        .collect();
    assert_eq!(
        summary,
        [
            (
                OrgKind::Orderer,
                "Orderer",
                "example.com",
                vec![
                    "orderer0.example.com",
                    "orderer1.example.com",
                    "orderer2.example.com"
                ],
                0,
                true
            ),
            (
                OrgKind::Peer,
                "Org1",
                "org1.example.com",
                vec!["peer0.org1.example.com", "peer1.org1.example.com"],
                1,
                true
            ),
            (
                OrgKind::Peer,
                "Org2",
                "org2.example.com",
                vec!["peer0.org2.example.com", "peer1.org2.example.com"],
                1,
                true
            ),
        ]
    );
    for plan in &plans {
        for node in &plan.nodes {
            assert!(
                node.sans.iter().any(|s| s == "localhost"),
                "{}",
                node.common_name
            );
            assert!(
                node.sans.iter().any(|s| s == "127.0.0.1"),
                "{}",
                node.common_name
            );
        }
    }
}

#[test]
fn templates_render_go_style_fields() {
    let vars = [
        ("Hostname", "peer0".to_owned()),
        ("Domain", "example.com".to_owned()),
    ];
    let render = |t: &str| config::render("F", t, &vars);
    assert_eq!(
        render("{{.Hostname}}.{{.Domain}}").unwrap(),
        "peer0.example.com"
    );
    assert_eq!(render("{{ .Hostname }}-x").unwrap(), "peer0-x");
    assert_eq!(render("plain").unwrap(), "plain");
    assert!(render("{{.Hostname").unwrap_err().contains("unclosed"));
    let error = render("{{.Index}}").unwrap_err();
    assert!(error.contains("use one of .Hostname, .Domain"), "{error}");
}
