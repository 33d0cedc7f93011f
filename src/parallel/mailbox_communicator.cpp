#include "parallel/mailbox_communicator.h"

#include "core/error.h"

namespace vi::parallel {

MailboxFactory& mailbox_factory() {
  static MailboxFactory f = nullptr;
  return f;
}

std::unique_ptr<Communicator> make_mailbox_communicator(const std::vector<int>& devices, const MailboxOptions& opt) {
  VI_CHECK(mailbox_factory() != nullptr,
           "GPU ranks need the mailbox communicator of a CUDA build; this binary was built without CUDA");
  return mailbox_factory()(devices, opt);
}

}  // namespace vi::parallel
