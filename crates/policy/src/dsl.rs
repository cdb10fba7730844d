//! Fabric's policy language.
//!
//! ```text
//! policy    := gate
//! gate      := ("AND" | "OR") "(" arg ("," arg)* ")"
//!            | "OutOf" "(" integer ("," arg)+ ")"
//! arg       := principal | gate
//! principal := quoted "<MSP ID>.<role>", role ∈ member admin client peer orderer
//! ```
//!
//! Gate names are accepted in the three spellings Fabric accepts (`AND`,
//! `and`, `And`; likewise `OR` and `OutOf`). `AND` of n arguments is
//! n-out-of-n and `OR` is 1-out-of-n.
//!
//! **Principal numbering follows Fabric.** Fabric evaluates the expression
//! with every gate's arguments evaluated before the gate itself, and a gate
//! numbers its own principal arguments only when it runs. So the principals
//! of nested gates are numbered before those of the gates that contain them:
//! `OR('A.member', AND('B.member', 'C.member'))` yields identities
//! `[B, C, A]` and the rule `OutOf(1, [SignedBy(2), OutOf(2, [SignedBy(0),
//! SignedBy(1)])])`. Principals are not de-duplicated. Matching this
//! matters: the envelope's bytes are part of chaincode definitions that every
//! peer must agree on.

use bytes::Bytes;
use prost::Message;
use weft_protos::common::msp_principal::Classification;
use weft_protos::common::msp_role::MspRoleType;
use weft_protos::common::signature_policy::{NOutOf, Type as Rule};
use weft_protos::common::{MspPrincipal, MspRole, SignaturePolicy, SignaturePolicyEnvelope};

use crate::{ParseError, PolicyError};

/// The most nested gates an expression may have; bounds the recursion on
/// untrusted input.
const NESTING_MAX: usize = 32;

/// Parses a policy expression into the envelope Fabric would produce.
pub fn parse(expression: &str) -> Result<SignaturePolicyEnvelope, ParseError> {
    let tokens = tokenize(expression)?;
    let mut parser = Parser {
        expression,
        tokens: &tokens,
        next: 0,
    };
    let root = parser.gate(0)?;
    if let Some(extra) = parser.peek() {
        return Err(parser.error_at(extra.column, "unexpected text after the policy"));
    }
    let mut identities = Vec::new();
    let rule = lower(&root, &mut identities);
    Ok(SignaturePolicyEnvelope {
        version: 0,
        rule: Some(rule),
        identities,
    })
}

/// Prints an envelope in the policy language. Only role principals can be
/// written in the language; other principal types are an error.
pub fn print(envelope: &SignaturePolicyEnvelope) -> Result<String, PolicyError> {
    let rule = envelope
        .rule
        .as_ref()
        .ok_or_else(|| malformed("the envelope has no rule"))?;
    let mut out = String::new();
    print_rule(rule, &envelope.identities, &mut out, 0)?;
    Ok(out)
}

#[derive(Debug, Clone, PartialEq, Eq)]
enum Node {
    Gate { required: usize, args: Vec<Node> },
    Principal { msp_id: String, role: MspRoleType },
}

/// Turns the syntax tree into Fabric's encoding, numbering principals in
/// Fabric's evaluation order (see the module docs).
fn lower(node: &Node, identities: &mut Vec<MspPrincipal>) -> SignaturePolicy {
    let Node::Gate { required, args } = node else {
        // The parser only produces gates at the root and lowers principals
        // through their gate below.
        return SignaturePolicy { r#type: None };
    };
    let mut rules: Vec<Option<SignaturePolicy>> = args
        .iter()
        .map(|arg| matches!(arg, Node::Gate { .. }).then(|| lower(arg, identities)))
        .collect();
    for (arg, rule) in args.iter().zip(rules.iter_mut()) {
        if let Node::Principal { msp_id, role } = arg {
            let index = i32::try_from(identities.len()).unwrap_or(i32::MAX);
            identities.push(role_principal(msp_id, *role));
            *rule = Some(SignaturePolicy {
                r#type: Some(Rule::SignedBy(index)),
            });
        }
    }
    SignaturePolicy {
        r#type: Some(Rule::NOutOf(NOutOf {
            n: i32::try_from(*required).unwrap_or(i32::MAX),
            rules: rules.into_iter().flatten().collect(),
        })),
    }
}

/// The `MSPPrincipal` of a role, as Fabric encodes it.
pub fn role_principal(msp_id: &str, role: MspRoleType) -> MspPrincipal {
    MspPrincipal {
        principal_classification: Classification::Role as i32,
        principal: Bytes::from(
            MspRole {
                msp_identifier: msp_id.to_owned(),
                role: role as i32,
            }
            .encode_to_vec(),
        ),
    }
}

fn print_rule(
    rule: &SignaturePolicy,
    identities: &[MspPrincipal],
    out: &mut String,
    depth: usize,
) -> Result<(), PolicyError> {
    if depth > NESTING_MAX {
        return Err(malformed("the rule is nested too deeply"));
    }
    match &rule.r#type {
        Some(Rule::SignedBy(index)) => {
            let principal = usize::try_from(*index)
                .ok()
                .and_then(|index| identities.get(index))
                .ok_or_else(|| malformed(&format!("signed_by {index} names no identity")))?;
            if principal.principal_classification != Classification::Role as i32 {
                return Err(malformed(
                    "only role principals can be printed as a policy expression",
                ));
            }
            let role = MspRole::decode(principal.principal.clone())
                .map_err(|e| malformed(&format!("malformed MSPRole: {e}")))?;
            let role_name = match MspRoleType::try_from(role.role) {
                Ok(MspRoleType::Member) => "member",
                Ok(MspRoleType::Admin) => "admin",
                Ok(MspRoleType::Client) => "client",
                Ok(MspRoleType::Peer) => "peer",
                Ok(MspRoleType::Orderer) => "orderer",
                Err(_) => return Err(malformed(&format!("unknown role {}", role.role))),
            };
            out.push_str(&format!("'{}.{role_name}'", role.msp_identifier));
        }
        Some(Rule::NOutOf(gate)) => {
            let count = gate.rules.len();
            match usize::try_from(gate.n) {
                Ok(1) => out.push_str("OR("),
                Ok(n) if n == count => out.push_str("AND("),
                _ => out.push_str(&format!("OutOf({}, ", gate.n)),
            }
            for (position, sub_rule) in gate.rules.iter().enumerate() {
                if position > 0 {
                    out.push_str(", ");
                }
                print_rule(sub_rule, identities, out, depth + 1)?;
            }
            out.push(')');
        }
        None => return Err(malformed("a rule has no type")),
    }
    Ok(())
}

fn malformed(reason: &str) -> PolicyError {
    PolicyError::Malformed {
        name: "signature policy".to_owned(),
        reason: reason.to_owned(),
    }
}

#[derive(Debug, Clone, PartialEq, Eq)]
enum TokenKind {
    Word(String),
    Quoted(String),
    Integer(usize),
    Open,
    Close,
    Comma,
}

#[derive(Debug, Clone)]
struct Token {
    kind: TokenKind,
    /// 1-based character column.
    column: usize,
}

fn tokenize(expression: &str) -> Result<Vec<Token>, ParseError> {
    let error = |column: usize, message: &str| ParseError {
        expression: expression.to_owned(),
        column,
        message: message.to_owned(),
    };
    let chars: Vec<char> = expression.chars().collect();
    let mut tokens = Vec::new();
    let mut i = 0;
    while i < chars.len() {
        let column = i + 1;
        let c = chars[i];
        let kind = match c {
            c if c.is_whitespace() => {
                i += 1;
                continue;
            }
            '(' => TokenKind::Open,
            ')' => TokenKind::Close,
            ',' => TokenKind::Comma,
            '\'' | '"' => {
                let close = chars[i + 1..]
                    .iter()
                    .position(|&other| other == c)
                    .ok_or_else(|| error(column, "unterminated quoted principal"))?;
                let text: String = chars[i + 1..i + 1 + close].iter().collect();
                i += close + 2;
                tokens.push(Token {
                    kind: TokenKind::Quoted(text),
                    column,
                });
                continue;
            }
            c if c.is_ascii_digit() => {
                let len = chars[i..].iter().take_while(|c| c.is_ascii_digit()).count();
                let text: String = chars[i..i + len].iter().collect();
                let value = text
                    .parse()
                    .map_err(|_| error(column, "number out of range"))?;
                i += len;
                tokens.push(Token {
                    kind: TokenKind::Integer(value),
                    column,
                });
                continue;
            }
            c if c.is_ascii_alphabetic() => {
                let len = chars[i..]
                    .iter()
                    .take_while(|c| c.is_ascii_alphanumeric())
                    .count();
                let text: String = chars[i..i + len].iter().collect();
                i += len;
                tokens.push(Token {
                    kind: TokenKind::Word(text),
                    column,
                });
                continue;
            }
            other => return Err(error(column, &format!("unexpected character {other:?}"))),
        };
        tokens.push(Token { kind, column });
        i += 1;
    }
    Ok(tokens)
}

struct Parser<'a> {
    expression: &'a str,
    tokens: &'a [Token],
    next: usize,
}

#[derive(Clone, Copy, PartialEq, Eq)]
enum GateKind {
    And,
    Or,
    OutOf,
}

impl<'a> Parser<'a> {
    fn gate(&mut self, depth: usize) -> Result<Node, ParseError> {
        let token = self.take("a policy gate (AND, OR or OutOf)")?;
        let TokenKind::Word(name) = &token.kind else {
            return Err(self.error_at(
                token.column,
                "expected a policy gate (AND, OR or OutOf); a policy cannot be a bare principal",
            ));
        };
        let kind = match name.as_str() {
            "AND" | "and" | "And" => GateKind::And,
            "OR" | "or" | "Or" => GateKind::Or,
            "OutOf" | "outof" | "OUTOF" => GateKind::OutOf,
            other => {
                return Err(self.error_at(
                    token.column,
                    &format!("unknown gate {other:?}; expected AND, OR or OutOf"),
                ));
            }
        };
        if depth >= NESTING_MAX {
            return Err(self.error_at(token.column, "policy is nested too deeply"));
        }
        self.expect(&TokenKind::Open, "'('")?;

        let mut required = None;
        if kind == GateKind::OutOf {
            let count = self.take("the number of required signatures")?;
            let TokenKind::Integer(n) = count.kind else {
                return Err(
                    self.error_at(count.column, "OutOf needs a number as its first argument")
                );
            };
            required = Some((n, count.column));
            self.expect(&TokenKind::Comma, "','")?;
        }

        let mut args = Vec::new();
        loop {
            args.push(self.arg(depth)?);
            let separator = self.take("',' or ')'")?;
            match separator.kind {
                TokenKind::Comma => continue,
                TokenKind::Close => break,
                _ => return Err(self.error_at(separator.column, "expected ',' or ')'")),
            }
        }
        let required = match (kind, required) {
            (GateKind::And, _) => args.len(),
            (GateKind::Or, _) => 1,
            (GateKind::OutOf, Some((n, column))) => {
                if n > args.len() {
                    return Err(self.error_at(
                        column,
                        &format!(
                            "OutOf({n}, …) can never be satisfied by {} arguments",
                            args.len()
                        ),
                    ));
                }
                n
            }
            (GateKind::OutOf, None) => 0,
        };
        Ok(Node::Gate { required, args })
    }

    fn arg(&mut self, depth: usize) -> Result<Node, ParseError> {
        let Some(token) = self.peek() else {
            return Err(self.error_at(self.end_column(), "expected a principal or a gate"));
        };
        match &token.kind {
            TokenKind::Quoted(text) => {
                let column = token.column;
                self.next += 1;
                self.principal(text, column)
            }
            TokenKind::Word(_) => self.gate(depth + 1),
            _ => Err(self.error_at(token.column, "expected a principal or a gate")),
        }
    }

    /// `<MSP ID>.<role>`: the MSP ID is everything before the last dot and
    /// may itself contain dots and dashes.
    fn principal(&self, text: &str, column: usize) -> Result<Node, ParseError> {
        let Some((msp_id, role)) = text.rsplit_once('.') else {
            return Err(self.error_at(
                column,
                &format!("principal {text:?} must be '<MSP ID>.<role>'"),
            ));
        };
        let valid_msp_id = !msp_id.is_empty()
            && msp_id
                .chars()
                .all(|c| c.is_ascii_alphanumeric() || c == '.' || c == '-');
        if !valid_msp_id {
            return Err(self.error_at(
                column,
                &format!("invalid MSP ID {msp_id:?} in principal {text:?}"),
            ));
        }
        let role = match role {
            "member" => MspRoleType::Member,
            "admin" => MspRoleType::Admin,
            "client" => MspRoleType::Client,
            "peer" => MspRoleType::Peer,
            "orderer" => MspRoleType::Orderer,
            other => {
                return Err(self.error_at(
                    column,
                    &format!("unknown role {other:?} in principal {text:?}; expected member, admin, client, peer or orderer"),
                ));
            }
        };
        Ok(Node::Principal {
            msp_id: msp_id.to_owned(),
            role,
        })
    }

    fn peek(&self) -> Option<&'a Token> {
        self.tokens.get(self.next)
    }

    fn take(&mut self, expected: &str) -> Result<Token, ParseError> {
        let token = self.tokens.get(self.next).cloned().ok_or_else(|| {
            self.error_at(
                self.end_column(),
                &format!("expected {expected}, found the end"),
            )
        })?;
        self.next += 1;
        Ok(token)
    }

    fn expect(&mut self, kind: &TokenKind, expected: &str) -> Result<(), ParseError> {
        let token = self.take(expected)?;
        if &token.kind == kind {
            Ok(())
        } else {
            Err(self.error_at(token.column, &format!("expected {expected}")))
        }
    }

    fn end_column(&self) -> usize {
        self.expression.chars().count() + 1
    }

    fn error_at(&self, column: usize, message: &str) -> ParseError {
        ParseError {
            expression: self.expression.to_owned(),
            column,
            message: message.to_owned(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn signed_by(index: i32) -> SignaturePolicy {
        SignaturePolicy {
            r#type: Some(Rule::SignedBy(index)),
        }
    }

    fn out_of(n: i32, rules: Vec<SignaturePolicy>) -> SignaturePolicy {
        SignaturePolicy {
            r#type: Some(Rule::NOutOf(NOutOf { n, rules })),
        }
    }

    #[test]
    fn flat_or_numbers_principals_left_to_right() {
        let envelope = parse("OR('Org1MSP.admin', 'Org1MSP.peer', 'Org1MSP.client')").unwrap();
        assert_eq!(
            envelope.rule,
            Some(out_of(1, vec![signed_by(0), signed_by(1), signed_by(2)]))
        );
        assert_eq!(
            envelope.identities,
            vec![
                role_principal("Org1MSP", MspRoleType::Admin),
                role_principal("Org1MSP", MspRoleType::Peer),
                role_principal("Org1MSP", MspRoleType::Client),
            ]
        );
    }

    #[test]
    fn nested_gates_number_their_principals_first() {
        let envelope = parse("OR('A.member', AND('B.member', 'C.member'))").unwrap();
        assert_eq!(
            envelope.rule,
            Some(out_of(
                1,
                vec![signed_by(2), out_of(2, vec![signed_by(0), signed_by(1)])]
            ))
        );
        let names: Vec<_> = envelope
            .identities
            .iter()
            .map(|p| MspRole::decode(p.principal.clone()).unwrap().msp_identifier)
            .collect();
        assert_eq!(names, ["B", "C", "A"]);
    }

    #[test]
    fn out_of_and_spellings() {
        let envelope = parse("outof(2, 'a.member', \"b.member\", 'c.member')").unwrap();
        assert_eq!(
            envelope.rule,
            Some(out_of(2, vec![signed_by(0), signed_by(1), signed_by(2)]))
        );
        assert_eq!(
            parse("and('a.peer')").unwrap(),
            parse("AND('a.peer')").unwrap()
        );
        assert_eq!(
            parse("Or('a.peer')").unwrap(),
            parse("OR('a.peer')").unwrap()
        );
    }

    #[test]
    fn principals_are_not_deduplicated() {
        let envelope = parse("AND('A.member', 'A.member')").unwrap();
        assert_eq!(envelope.identities.len(), 2);
    }

    #[test]
    fn msp_ids_may_contain_dots_and_dashes() {
        let envelope = parse("OR('org-1.example.com.peer')").unwrap();
        let role = MspRole::decode(envelope.identities[0].principal.clone()).unwrap();
        assert_eq!(role.msp_identifier, "org-1.example.com");
        assert_eq!(role.role, MspRoleType::Peer as i32);
    }

    #[test]
    fn printing_round_trips() {
        for expression in [
            "OR('A.member', AND('B.peer', 'C.admin'))",
            "OutOf(2, 'A.member', 'B.member', 'C.member')",
            "AND('A.client', OR('B.orderer', 'C.member'), 'D.peer')",
        ] {
            let envelope = parse(expression).unwrap();
            assert_eq!(print(&envelope).unwrap(), expression);
            assert_eq!(parse(&print(&envelope).unwrap()).unwrap(), envelope);
        }
    }

    #[test]
    fn errors_name_the_column() {
        let cases = [
            ("OR('Org1.member', AMD('Org2.peer'))", 19, "unknown gate"),
            ("OR('Org1.membr')", 4, "unknown role"),
            ("OR('Org1member')", 4, "must be"),
            ("OR('Org1.member'", 17, "expected ',' or ')'"),
            ("OR('Org1.member)", 4, "unterminated"),
            ("'Org1.member'", 1, "bare principal"),
            ("OutOf(3, 'A.member', 'B.member')", 7, "never be satisfied"),
            ("OutOf('A.member')", 7, "needs a number"),
            ("OR('A.member') x", 16, "unexpected text"),
            ("OR('A.member' ; )", 15, "unexpected character"),
            ("", 1, "found the end"),
        ];
        for (expression, column, message) in cases {
            let error = parse(expression).unwrap_err();
            assert_eq!(error.column, column, "{expression}: {error}");
            assert!(error.message.contains(message), "{expression}: {error}");
        }
    }

    #[test]
    fn deep_nesting_is_refused_not_overflowed() {
        let expression = format!("{}'A.member'{}", "OR(".repeat(1000), ")".repeat(1000));
        assert!(
            parse(&expression)
                .unwrap_err()
                .message
                .contains("nested too deeply")
        );
    }
}
