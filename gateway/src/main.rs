fn main() -> std::process::ExitCode {
    troupe::cli::main()
}
