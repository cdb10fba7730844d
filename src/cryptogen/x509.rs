//! Keys and certificates shaped like cryptogen's, byte for byte where it
//! matters.
//!
//! rcgen writes the certificate frame (version, serial, names, validity,
//! public key, signature); the extensions are encoded here, because
//! cryptogen's certificates (Go's `x509.CreateCertificate`) differ from
//! rcgen's defaults in ways Fabric tools can see:
//!
//! - extension order is KeyUsage, ExtKeyUsage, BasicConstraints,
//!   SubjectKeyIdentifier (CAs) or AuthorityKeyIdentifier (issued), SAN;
//! - issued certificates carry `CA:FALSE` but no SubjectKeyIdentifier;
//! - key identifiers are the full SHA-256 of the uncompressed public key
//!   point (32 bytes), not RFC 7093's truncated 20 bytes;
//! - certificate signatures are low-S. cryptogen does not normalise them
//!   (about half of its certificates carry a high-S signature); Fabric's MSP
//!   rewrites such a certificate into low-S form in memory when it loads it,
//!   so issuing low-S from the start makes the bytes on disk the bytes
//!   Fabric compares.
//!
//! Subject names follow Go's `pkix.Name` order (C, ST, L, street, postal
//! code, O, OU, CN), each value a PrintableString when its characters
//! allow and a UTF8String otherwise, as Go encodes them.

use anyhow::Context;
use rcgen::{
    CertificateParams, CustomExtension, DistinguishedName, DnType, DnValue, Issuer, KeyPair,
    PublicKeyData, SerialNumber, SignatureAlgorithm, SigningKey,
};
use ring::rand::{SecureRandom, SystemRandom};
use time::{Duration, OffsetDateTime};

/// cryptogen backdates certificates by five minutes, to tolerate clock skew.
const BACKDATE: Duration = Duration::minutes(5);
/// cryptogen's lifetime: 3650 days ("around 10 years").
const LIFETIME: Duration = Duration::days(3650);
/// Bytes of randomness in a serial number (cryptogen: a random 128-bit
/// integer).
const SERIAL_BYTES: usize = 16;

// Extension OIDs.
const OID_SUBJECT_KEY_IDENTIFIER: &[u64] = &[2, 5, 29, 14];
const OID_KEY_USAGE: &[u64] = &[2, 5, 29, 15];
const OID_SUBJECT_ALT_NAME: &[u64] = &[2, 5, 29, 17];
const OID_BASIC_CONSTRAINTS: &[u64] = &[2, 5, 29, 19];
const OID_AUTHORITY_KEY_IDENTIFIER: &[u64] = &[2, 5, 29, 35];
const OID_EXT_KEY_USAGE: &[u64] = &[2, 5, 29, 37];
// Attribute types rcgen has no name for.
const OID_ORGANIZATIONAL_UNIT: &[u64] = &[2, 5, 4, 11];
const OID_STREET_ADDRESS: &[u64] = &[2, 5, 4, 9];
const OID_POSTAL_CODE: &[u64] = &[2, 5, 4, 17];
// DER of the extended key usage purposes, OBJECT IDENTIFIER included.
const DER_SERVER_AUTH: &[u8] = &[0x06, 0x08, 0x2b, 0x06, 0x01, 0x05, 0x05, 0x07, 0x03, 0x01];
const DER_CLIENT_AUTH: &[u8] = &[0x06, 0x08, 0x2b, 0x06, 0x01, 0x05, 0x05, 0x07, 0x03, 0x02];

// KeyUsage bit numbers (RFC 5280 §4.2.1.3).
const DIGITAL_SIGNATURE: u8 = 0;
const KEY_ENCIPHERMENT: u8 = 2;
const KEY_CERT_SIGN: u8 = 5;
const CRL_SIGN: u8 = 6;

/// The validity period every certificate of one run shares.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) struct Validity {
    pub not_before: OffsetDateTime,
    pub not_after: OffsetDateTime,
}

impl Validity {
    /// cryptogen's period for a run started at `now`: `now` rounded to the
    /// nearest minute, minus five minutes, for 3650 days.
    pub fn starting_at(now: OffsetDateTime) -> anyhow::Result<Self> {
        let nanos = now.unix_timestamp_nanos();
        let minute = 60_000_000_000i128;
        let below = nanos.rem_euclid(minute);
        // Go's Time.Round rounds halfway values up.
        let rounded = if below * 2 >= minute {
            nanos - below + minute
        } else {
            nanos - below
        };
        let rounded = OffsetDateTime::from_unix_timestamp_nanos(rounded)
            .context("the clock is outside the range of certificate dates")?;
        let not_before = rounded - BACKDATE;
        Ok(Self {
            not_before,
            not_after: not_before + LIFETIME,
        })
    }
}

/// A subject name in cryptogen's terms.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) struct Name {
    pub country: String,
    pub province: String,
    pub locality: String,
    pub street_address: Option<String>,
    pub postal_code: Option<String>,
    pub organization: Option<String>,
    pub organizational_units: Vec<String>,
    pub common_name: String,
}

impl Name {
    fn to_distinguished_name(&self) -> anyhow::Result<DistinguishedName> {
        let mut name = DistinguishedName::new();
        name.push(DnType::CountryName, value(&self.country));
        name.push(DnType::StateOrProvinceName, value(&self.province));
        name.push(DnType::LocalityName, value(&self.locality));
        if let Some(street) = &self.street_address {
            name.push(
                DnType::CustomDnType(OID_STREET_ADDRESS.to_vec()),
                value(street),
            );
        }
        if let Some(postal_code) = &self.postal_code {
            name.push(
                DnType::CustomDnType(OID_POSTAL_CODE.to_vec()),
                value(postal_code),
            );
        }
        if let Some(organization) = &self.organization {
            name.push(DnType::OrganizationName, value(organization));
        }
        // rcgen keeps one value per attribute type; a second OU (the CA's
        // OU plus a NodeOU) goes in under the same OID spelled as a custom
        // type. It is then its own RDN where Go would put both OUs in one
        // multi-valued RDN; X.509 readers, Fabric's included, list both.
        match self.organizational_units.as_slice() {
            [] => {}
            [ou] => name.push(DnType::OrganizationalUnitName, value(ou)),
            [first, second] => {
                name.push(DnType::OrganizationalUnitName, value(first));
                name.push(
                    DnType::CustomDnType(OID_ORGANIZATIONAL_UNIT.to_vec()),
                    value(second),
                );
            }
            more => anyhow::bail!(
                "{}: {} organizational units; at most 2 are supported",
                self.common_name,
                more.len()
            ),
        }
        name.push(DnType::CommonName, value(&self.common_name));
        Ok(name)
    }
}

/// Go encodes a name attribute as PrintableString when every character
/// allows it, else as UTF8String. Names must match byte for byte: an
/// issued certificate's issuer is compared with its CA's subject.
fn value(text: &str) -> DnValue {
    match rcgen::string::PrintableString::try_from(text) {
        Ok(printable) => DnValue::PrintableString(printable),
        Err(_) => DnValue::Utf8String(text.to_owned()),
    }
}

/// A private key with its PEM (PKCS#8, `PRIVATE KEY`) encoding.
fn new_key() -> anyhow::Result<(KeyPair, String)> {
    let key =
        KeyPair::generate_for(&rcgen::PKCS_ECDSA_P256_SHA256).context("generating a P-256 key")?;
    let pem = key.serialize_pem();
    Ok((key, pem))
}

/// cryptogen's key identifier: SHA-256 of the uncompressed public point.
fn key_identifier(key: &KeyPair) -> Vec<u8> {
    ring::digest::digest(&ring::digest::SHA256, key.der_bytes())
        .as_ref()
        .to_vec()
}

fn serial_number(rng: &SystemRandom) -> anyhow::Result<SerialNumber> {
    let mut bytes = [0u8; SERIAL_BYTES];
    rng.fill(&mut bytes)
        .map_err(|_| anyhow::anyhow!("the system random number generator failed"))?;
    // A serial number must be positive; zero has a 2^-128 chance.
    if bytes.iter().all(|&b| b == 0) {
        bytes[SERIAL_BYTES - 1] = 1;
    }
    Ok(SerialNumber::from_slice(&bytes))
}

/// A certificate authority of one org: the signing CA or the TLS CA.
pub(super) struct Ca {
    params: CertificateParams,
    key: KeyPair,
    key_identifier: Vec<u8>,
    /// The subject fields issued certificates copy (all but O and CN).
    name: Name,
    pub cert_pem: String,
    pub key_pem: String,
}

impl std::fmt::Debug for Ca {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Ca")
            .field("name", &self.name)
            .finish_non_exhaustive()
    }
}

/// What an issued certificate is for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Profile {
    /// An MSP signing identity (`signcerts/`): digital signature only.
    Signing,
    /// A TLS server and client certificate (`tls/`).
    Tls,
}

/// An issued certificate and its key, both PEM.
#[derive(Debug, Clone)]
pub(super) struct Issued {
    pub cert_pem: String,
    pub key_pem: String,
}

impl Ca {
    /// A self-signed root like cryptogen's `NewCA`.
    pub fn new(name: &Name, validity: &Validity, rng: &SystemRandom) -> anyhow::Result<Self> {
        let (key, key_pem) = new_key()?;
        let key_identifier = key_identifier(&key);
        let mut params = CertificateParams::default();
        params.distinguished_name = name.to_distinguished_name()?;
        params.not_before = validity.not_before;
        params.not_after = validity.not_after;
        params.serial_number = Some(serial_number(rng)?);
        params.custom_extensions = vec![
            key_usage(&[DIGITAL_SIGNATURE, KEY_ENCIPHERMENT, KEY_CERT_SIGN, CRL_SIGN]),
            extended_key_usage(&[DER_CLIENT_AUTH, DER_SERVER_AUTH]),
            basic_constraints(true),
            extension(
                OID_SUBJECT_KEY_IDENTIFIER,
                false,
                der(0x04, &key_identifier),
            ),
        ];
        let cert = params
            .self_signed(&LowS(&key))
            .with_context(|| format!("signing the CA certificate {}", name.common_name))?;
        Ok(Self {
            cert_pem: cert.pem(),
            params,
            key,
            key_identifier,
            name: name.clone(),
            key_pem,
        })
    }

    /// Issues a certificate for `common_name` with a fresh key, like
    /// cryptogen's `SignCertificate`: the subject copies the CA's C, ST, L,
    /// street, postal code and OU, adds `extra_ous` and the CN, and has no O.
    pub fn issue(
        &self,
        common_name: &str,
        extra_ous: &[&str],
        profile: Profile,
        sans: &[String],
        validity: &Validity,
        rng: &SystemRandom,
    ) -> anyhow::Result<Issued> {
        let (key, key_pem) = new_key()?;
        let mut organizational_units = self.name.organizational_units.clone();
        organizational_units.extend(extra_ous.iter().map(|ou| (*ou).to_owned()));
        let subject = Name {
            organization: None,
            organizational_units,
            common_name: common_name.to_owned(),
            ..self.name.clone()
        };
        let mut params = CertificateParams::default();
        params.distinguished_name = subject.to_distinguished_name()?;
        params.not_before = validity.not_before;
        params.not_after = validity.not_after;
        params.serial_number = Some(serial_number(rng)?);
        let mut extensions = match profile {
            Profile::Signing => vec![key_usage(&[DIGITAL_SIGNATURE])],
            Profile::Tls => vec![
                key_usage(&[DIGITAL_SIGNATURE, KEY_ENCIPHERMENT]),
                extended_key_usage(&[DER_SERVER_AUTH, DER_CLIENT_AUTH]),
            ],
        };
        extensions.push(basic_constraints(false));
        extensions.push(authority_key_identifier(&self.key_identifier));
        if !sans.is_empty() {
            extensions.push(subject_alt_names(sans));
        }
        params.custom_extensions = extensions;
        let issuer = Issuer::from_params(&self.params, LowS(&self.key));
        let cert = params
            .signed_by(&key, &issuer)
            .with_context(|| format!("signing the certificate of {common_name}"))?;
        Ok(Issued {
            cert_pem: cert.pem(),
            key_pem,
        })
    }
}

/// Signs with a [`KeyPair`] and rewrites the signature into low-S form:
/// Fabric sanitises certificates to low-S before comparing identities, so
/// a canonical signature keeps the bytes on disk and in memory the same.
struct LowS<'a>(&'a KeyPair);

impl PublicKeyData for LowS<'_> {
    fn der_bytes(&self) -> &[u8] {
        self.0.der_bytes()
    }

    fn algorithm(&self) -> &'static SignatureAlgorithm {
        self.0.algorithm()
    }
}

impl SigningKey for LowS<'_> {
    fn sign(&self, message: &[u8]) -> Result<Vec<u8>, rcgen::Error> {
        let signature = self.0.sign(message)?;
        weft_msp::crypto::normalize_low_s(&signature).map_err(|_| rcgen::Error::RemoteKeyError)
    }
}

fn extension(oid: &[u64], critical: bool, content: Vec<u8>) -> CustomExtension {
    let mut extension = CustomExtension::from_oid_content(oid, content);
    extension.set_criticality(critical);
    extension
}

/// KeyUsage as Go writes it: a BIT STRING without trailing zero bits.
fn key_usage(bits: &[u8]) -> CustomExtension {
    let byte = bits.iter().fold(0u8, |byte, &bit| byte | (0x80 >> bit));
    let highest = bits.iter().copied().max().unwrap_or(0);
    let unused_bits = 7 - highest;
    extension(OID_KEY_USAGE, true, der(0x03, &[unused_bits, byte]))
}

fn extended_key_usage(purposes: &[&[u8]]) -> CustomExtension {
    extension(OID_EXT_KEY_USAGE, false, der(0x30, &purposes.concat()))
}

/// `CA:TRUE` without a path length, or `CA:FALSE` (an empty SEQUENCE, the
/// DER of the default).
fn basic_constraints(is_ca: bool) -> CustomExtension {
    let content = if is_ca {
        der(0x30, &der(0x01, &[0xff]))
    } else {
        der(0x30, &[])
    };
    extension(OID_BASIC_CONSTRAINTS, true, content)
}

fn authority_key_identifier(key_identifier: &[u8]) -> CustomExtension {
    // keyIdentifier [0] IMPLICIT OCTET STRING
    extension(
        OID_AUTHORITY_KEY_IDENTIFIER,
        false,
        der(0x30, &der(0x80, key_identifier)),
    )
}

/// SANs in order: IP addresses as iPAddress [7], anything else as
/// dNSName [2] (the names were checked to be ASCII when the config was
/// read).
fn subject_alt_names(sans: &[String]) -> CustomExtension {
    let mut names = Vec::new();
    for san in sans {
        match san.parse::<std::net::IpAddr>() {
            Ok(std::net::IpAddr::V4(ip)) => names.extend(der(0x87, &ip.octets())),
            Ok(std::net::IpAddr::V6(ip)) => names.extend(der(0x87, &ip.octets())),
            Err(_) => names.extend(der(0x82, san.as_bytes())),
        }
    }
    extension(OID_SUBJECT_ALT_NAME, false, der(0x30, &names))
}

/// One DER tag-length-value.
fn der(tag: u8, content: &[u8]) -> Vec<u8> {
    let mut out = Vec::with_capacity(content.len() + 4);
    out.push(tag);
    let len = content.len();
    if len < 0x80 {
        out.push(len as u8);
    } else {
        let bytes = len.to_be_bytes();
        let first = bytes
            .iter()
            .position(|&b| b != 0)
            .unwrap_or(bytes.len() - 1);
        let significant = &bytes[first..];
        out.push(0x80 | significant.len() as u8);
        out.extend_from_slice(significant);
    }
    out.extend_from_slice(content);
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn key_usage_bits_match_go() {
        // The exact extension values found in cryptogen's certificates.
        let value = |ext: CustomExtension| ext.content().to_vec();
        assert_eq!(
            value(key_usage(&[
                DIGITAL_SIGNATURE,
                KEY_ENCIPHERMENT,
                KEY_CERT_SIGN,
                CRL_SIGN
            ])),
            [0x03, 0x02, 0x01, 0xa6]
        );
        assert_eq!(
            value(key_usage(&[DIGITAL_SIGNATURE])),
            [0x03, 0x02, 0x07, 0x80]
        );
        assert_eq!(
            value(key_usage(&[DIGITAL_SIGNATURE, KEY_ENCIPHERMENT])),
            [0x03, 0x02, 0x05, 0xa0]
        );
        assert_eq!(
            value(basic_constraints(true)),
            [0x30, 0x03, 0x01, 0x01, 0xff]
        );
        assert_eq!(value(basic_constraints(false)), [0x30, 0x00]);
    }

    #[test]
    fn der_lengths_use_the_short_and_long_forms() {
        assert_eq!(der(0x04, &[]), [0x04, 0x00]);
        assert_eq!(der(0x04, &[0; 0x7f])[..2], [0x04, 0x7f]);
        assert_eq!(der(0x04, &[0; 0x80])[..3], [0x04, 0x81, 0x80]);
        assert_eq!(der(0x04, &[0; 0x1234])[..4], [0x04, 0x82, 0x12, 0x34]);
    }

    #[test]
    fn validity_rounds_to_the_minute_and_backdates_like_cryptogen() {
        let at = |unix: i64| OffsetDateTime::from_unix_timestamp(unix).unwrap();
        // 10:35:29 rounds down to 10:35, 10:35:30 up to 10:36.
        let base = 1_795_343_700; // 2026-11-22 10:35:00 UTC
        let down = Validity::starting_at(at(base + 29)).unwrap();
        assert_eq!(down.not_before, at(base - 300));
        let up = Validity::starting_at(at(base + 30)).unwrap();
        assert_eq!(up.not_before, at(base + 60 - 300));
        assert_eq!(down.not_after - down.not_before, Duration::days(3650));
    }
}
