#[tokio::main]
async fn main() -> Result<(), lambda_runtime::Error> {
    idempotent_payment::run().await
}
