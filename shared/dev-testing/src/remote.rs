//! DynamoDB itself as the test endpoint: an endpoint off loopback (a region's) gets the
//! environment's or the profile's credentials and its region, and the tables made there are
//! deleted when asked ([`delete_remote_tables`], which the benchmarks call).

use std::sync::Mutex;

use aws_sdk_dynamodb::config::Region;
use aws_sdk_dynamodb::Client;

/// Whether `endpoint` is on this machine (DynamoDB Local, a loopback proxy in front of it).
/// Clients of a local endpoint sign with dummy credentials for `us-east-1`; clients of any
/// other (a region's, `https://dynamodb.eu-west-1.amazonaws.com`) sign with the credentials of
/// the environment or the AWS profile, for the region of `AWS_REGION` (or the endpoint's name).
pub fn is_local(endpoint: &str) -> bool {
    let rest = endpoint
        .split_once("://")
        .map_or(endpoint, |(_, rest)| rest);
    let authority = rest.split('/').next().unwrap_or(rest);
    let host = match authority.strip_prefix('[') {
        Some(v6) => v6.split(']').next().unwrap_or(v6),
        None => authority.split(':').next().unwrap_or(authority),
    };
    host == "localhost" || host == "::1" || host.starts_with("127.")
}

/// The signing region of a remote endpoint: `AWS_REGION`, `AWS_DEFAULT_REGION`, or the
/// region in a `dynamodb.<region>.amazonaws.com` name.
pub(crate) fn region(endpoint: &str) -> Region {
    region_of(endpoint, |name| std::env::var(name).ok())
}

fn region_of(endpoint: &str, env: impl Fn(&str) -> Option<String>) -> Region {
    let from_env = ["AWS_REGION", "AWS_DEFAULT_REGION"]
        .iter()
        .find_map(|name| env(name).filter(|v| !v.is_empty()));
    let from_name = || {
        let host = endpoint
            .split_once("://")
            .map_or(endpoint, |(_, rest)| rest);
        let mut labels = host.split(['.', '/', ':']);
        (labels.next() == Some("dynamodb"))
            .then(|| labels.next().map(str::to_owned))
            .flatten()
    };
    Region::new(
        from_env
            .or_else(from_name)
            .unwrap_or_else(|| "us-east-1".into()),
    )
}

/// The environment's credentials, else the AWS profile's (`AWS_PROFILE`, `~/.aws`).
pub(crate) fn credentials() -> aws_config::meta::credentials::CredentialsProviderChain {
    aws_config::meta::credentials::CredentialsProviderChain::first_try(
        "Environment",
        aws_config::environment::EnvironmentVariableCredentialsProvider::new(),
    )
    .or_else(
        "Profile",
        aws_config::profile::ProfileFileCredentialsProvider::builder().build(),
    )
}

/// Tables this process created on a remote endpoint, deleted by [`delete_remote_tables`].
static REMOTE_TABLES: Mutex<Vec<String>> = Mutex::new(Vec::new());

/// Remember tables created on a remote endpoint, for [`delete_remote_tables`].
pub(crate) fn remember(names: impl IntoIterator<Item = String>) {
    match REMOTE_TABLES.lock() {
        Ok(mut all) => all.extend(names),
        Err(poisoned) => poisoned.into_inner().extend(names),
    }
}

/// Delete the tables [`template_tables`](crate::template_tables) created on a remote endpoint in this process (tables
/// on DynamoDB Local are left: it runs in memory). Returns the names that could not be
/// deleted, with why.
pub async fn delete_remote_tables(client: &Client) -> Vec<String> {
    let names: Vec<String> = match REMOTE_TABLES.lock() {
        Ok(mut names) => names.drain(..).collect(),
        Err(poisoned) => poisoned.into_inner().drain(..).collect(),
    };
    let mut failed = Vec::new();
    for name in names {
        if let Err(e) = client.delete_table().table_name(&name).send().await {
            failed.push(format!("{name}: {e}"));
        }
    }
    failed
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn loopback_endpoints_are_local_and_regional_ones_are_not() {
        for local in [
            "http://127.0.0.1:8000",
            "http://localhost:8000/",
            "http://[::1]:8000",
            "127.0.0.2:9",
        ] {
            assert!(is_local(local), "{local}");
        }
        for remote in [
            "https://dynamodb.eu-west-1.amazonaws.com",
            "http://10.0.0.5:8000",
            "https://localhost.example.com",
        ] {
            assert!(!is_local(remote), "{remote}");
        }
    }

    #[test]
    fn a_regional_endpoint_names_its_signing_region_unless_the_environment_does() {
        let none = |_: &str| None;
        let region = region_of("https://dynamodb.eu-west-1.amazonaws.com", none);
        assert_eq!(region.as_ref(), "eu-west-1");
        assert_eq!(
            region_of("http://10.0.0.5:8000", none).as_ref(),
            "us-east-1"
        );
        let env = |name: &str| (name == "AWS_DEFAULT_REGION").then(|| "ap-south-1".to_owned());
        let region = region_of("https://dynamodb.eu-west-1.amazonaws.com", env);
        assert_eq!(region.as_ref(), "ap-south-1");
    }
}
