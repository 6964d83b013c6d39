#[tokio::main]
async fn main() -> Result<(), lambda_runtime::Error> {
    processor_sqs::run().await
}
